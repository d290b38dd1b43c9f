"""The release matrix's Debian roots: a root that cannot be built fails setup with one line naming the step,
never a matrix skipped in silence."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ackscope.workloads.rabbitmq_release import LocalBrokerError, Release

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "rabbitmq-roots.sh"


def test_a_root_that_cannot_be_fetched_fails_with_one_line_naming_the_step(tmp_path):
    # Nothing listens on the discard port: the package registry is unreachable.
    done = subprocess.run(["bash", str(SCRIPT), "trixie"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ACKSCOPE_ROOTS": str(tmp_path),
                               "ACKSCOPE_DEBIAN_MIRROR": "http://127.0.0.1:9/debian"})
    assert done.returncode != 0
    first = done.stderr.splitlines()[0]
    assert first == (f"rabbitmq-roots: debootstrap of Debian trixie from http://127.0.0.1:9/debian failed; the end "
                     f"of {tmp_path}/trixie.log:"), done.stderr
    assert "Traceback" not in done.stderr


def test_a_release_whose_root_was_never_built_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setattr("ackscope.workloads.rabbitmq_release.ROOTS", tmp_path)
    with pytest.raises(LocalBrokerError, match=r"no RabbitMQ root for Debian sid at .*: run scripts/rabbitmq-roots.sh sid"):
        Release.in_root("sid")


# -- the Debian mirror: the one the machine's APT uses (scripts/debian-mirror.sh) ---------------------------------
MIRROR = Path(__file__).resolve().parents[1] / "scripts" / "debian-mirror.sh"
DEBIAN = """Types: deb
URIs: http://mirror.example.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
# a comment between fields
URIs: http://mirror.example.org/debian/
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def _mirror(apt: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f'source "{MIRROR}" && debian_mirror rabbitmq-roots "{apt}"'],
                          capture_output=True, text=True, timeout=30,
                          env={**{k: v for k, v in os.environ.items() if k != "ACKSCOPE_DEBIAN_MIRROR"}, **env})


def _apt(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_the_mirror_is_debian_s_main_archive_among_the_machine_s_apt_sources(tmp_path):
    # Another vendor's repositories (signed by their own keys) come first by name and are never taken; nor a disabled
    # stanza, a security suite, a source-package line, a comment, a file APT does not read.
    apt = _apt(tmp_path, {
        "sources.list": "# deb http://commented.example.org/debian bookworm main\n"
                        "deb-src http://sources.example.org/debian bookworm main\n",
        "sources.list.d/a-vendor.sources": "Types: deb\nURIs: https://vendor.example.com/deb/debian\nSuites: bookworm\n"
                                           "Components: main\nSigned-By: /usr/share/keyrings/vendor.gpg\n\n"
                                           "Types: deb\nURIs: http://off.example.org/debian\nSuites: bookworm\n"
                                           "Components: main\nEnabled: no\n",
        "sources.list.d/b-vendor.list": "deb [arch=amd64 signed-by=/etc/apt/keyrings/b.gpg] https://b.example.com/x "
                                        "bookworm main\n",
        "sources.list.d/old.list.disabled": "deb http://disabled.example.org/debian bookworm main\n",
        "sources.list.d/debian.sources": DEBIAN})
    done = _mirror(apt)
    assert (done.returncode, done.stdout, done.stderr) == (0, "http://mirror.example.org/debian\n", "")


def test_a_one_line_entry_is_read_and_the_archive_s_own_keyring_comes_first(tmp_path):
    apt = _apt(tmp_path, {
        "sources.list": "  deb [ arch=amd64 ] http://first.example.org/debian bookworm main  # unsigned, kept\n",
        "sources.list.d/z.list": "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                                 "https://signed.example.org/debian/ trixie main non-free-firmware\n"})
    assert _mirror(apt).stdout == "https://signed.example.org/debian\n"
    (tmp_path / "sources.list.d" / "z.list").unlink()
    assert _mirror(apt).stdout == "http://first.example.org/debian\n"


def test_without_a_debian_source_it_says_in_one_line_to_set_the_variable_which_overrides_apt(tmp_path):
    apt = _apt(tmp_path, {"sources.list.d/updates.list":
                          "deb http://mirror.example.org/debian bookworm-updates main\n"})
    done = _mirror(apt)
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("rabbitmq-roots: no Debian mirror in APT's")
    assert "set ACKSCOPE_DEBIAN_MIRROR" in done.stderr
    apt = _apt(tmp_path, {"sources.list.d/debian.sources": DEBIAN})
    assert _mirror(apt, ACKSCOPE_DEBIAN_MIRROR="http://chosen.example.org/debian/").stdout == \
        "http://chosen.example.org/debian\n"


def test_no_script_names_a_mirror():
    for script in ("rabbitmq-roots.sh", "container-image.sh", "debian-mirror.sh"):
        text = (MIRROR.parent / script).read_text()
        assert "debian_mirror" in text and "://" not in text, script
