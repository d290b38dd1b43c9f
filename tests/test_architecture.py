"""The architecture and the packaging, as a user of a wheel and a contributor meet them: import-linter's
contracts hold and catch a circle between parts, a wheel carries its data files and none of the test machinery, and
no folder of the repository imports under a second name."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# Service-free but slow (see the `thorough` marker in pyproject.toml): CI runs them, the fast loop does not.
pytestmark = pytest.mark.thorough

ROOT = Path(__file__).resolve().parent.parent
LINT = ROOT / "scripts" / "lint-imports.sh"


def _source_copy(where: Path) -> Path:
    """The source tree as git sees it (what a clean clone of it holds), copied."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, where / name)
    return where


def test_the_layer_and_independence_contracts_hold():
    done = subprocess.run(["bash", str(LINT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 3 kept, 0 broken." in done.stdout


@pytest.mark.parametrize("module, added, contract, chain", [
    # A part importing another part: the circle issue 12 removed (exporter <-> diagnosis).
    ("exporter/poller.py", "from ackscope.diagnosis.rules import RULES", "The parts are independent of each other",
     "ackscope.exporter.poller -> ackscope.diagnosis.rules"),
    # The model reaching up into a layer above it.
    ("model/snapshot.py", "import ackscope.core.config",
     "Layers: apps above the parts, the parts above core, core above the model",
     "ackscope.model.snapshot -> ackscope.core.config"),
])
def test_an_import_against_the_architecture_breaks_the_build_and_names_the_chain(tmp_path, module, added, contract,
                                                                                  chain):
    tree = _source_copy(tmp_path / "src")
    path = tree / module
    path.write_text(path.read_text() + f"\n{added}  # noqa: E402,F401\n")
    done = subprocess.run(["bash", str(LINT), str(tree)], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert f"{contract} BROKEN" in done.stdout
    assert chain in done.stdout, done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """ackscope's wheel, built from the source tree as a user's pip builds it."""
    where = tmp_path_factory.mktemp("wheel")
    # From the files git sees: a build/ left in the working tree could carry modules deleted since.
    tree = _source_copy(tmp_path_factory.mktemp("src"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(where), str(tree)],
                   check=True, capture_output=True, timeout=300)
    return next(where.glob("ackscope-*.whl"))


def test_the_wheel_holds_what_the_product_runs_and_none_of_the_test_machinery(wheel):
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    # What the demo and `ackscope scenario` run stays; what only tests/ and bench/ use is testkit/'s.
    workloads = {Path(n).stem for n in names if n.startswith("ackscope/workloads/") and n.endswith(".py")}
    assert {"private_broker", "node_files", "rabbitmq_release", "ports", "scenarios"} <= workloads
    testkit = {p.stem: p.read_bytes() for p in (ROOT / "testkit" / "ackscope_testkit").glob("*.py")}
    testkit.pop("__init__")
    assert len(testkit) >= 7 and not set(testkit) & workloads, sorted(set(testkit) & workloads)
    copied = [n for n in names if n.endswith(".py") and archive.read(n) in testkit.values()]
    assert not copied, copied
    assert not [n for n in names if n.startswith(("ackscope_testkit/", "tests/", "bench/", "testkit/"))]


@pytest.mark.parametrize("part", ["package", "model", "core", "sources", "probes", "diagnosis", "exporter",
                                  "pipeline", "dashboard", "workloads", "apps", "deploy"])
def test_a_folder_of_the_repository_cannot_be_imported_under_a_second_name(part):
    # From the repository root, Python finds exporter/ as a package `exporter` beside the installed
    # ackscope.exporter: the same files loaded twice, two copies of every class. Each folder refuses.
    done = subprocess.run([sys.executable, "-c", f"import {part}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"ImportError: {part} is ackscope's root: import ackscope" if part == "package" else
        f"ImportError: {part} is part of ackscope: import ackscope.{part}")


def test_an_installed_wheel_carries_the_alert_rules_the_demo_loads_and_the_spark_logging_config(wheel, tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp_path), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    probe = ("import ackscope, ackscope.apps.demo as demo\n"
             "from importlib import resources\n"
             "print(ackscope.__file__)\n"
             "print(len(demo.ALERT_RULES.read_text()))\n"
             "print(resources.files('ackscope.pipeline').joinpath('log4j2.properties').is_file())\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    where, rules_size, log4j = done.stdout.split()
    assert where.startswith(str(tmp_path)), where  # the installed copy, not the source tree
    assert int(rules_size) == len((ROOT / "deploy" / "prometheus" / "ackscope-alerts.yml").read_text())
    assert log4j == "True"
