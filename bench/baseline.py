"""The ackscope command of a baseline checkout, for a benchmark's "before" beside this checkout's "after" in one run."""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path


def baseline_command(source: Path, work: Path) -> list[str]:
    """The ackscope command of the code in `source` (a checkout of the baseline, e.g. a git worktree), run by this
    interpreter, whose libraries it shares: its packages laid out under `work` as pyproject.toml's package-dir maps
    them (the root package is a folder of its own), on PYTHONPATH ahead of the installed ones, so that the processes
    it starts (Spark's workers, Streamlit's server) run the baseline too; it checks that they do."""
    mapping = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    link = work / "before-package"
    shutil.rmtree(link, ignore_errors=True)
    root = link / "ackscope"
    root.mkdir(parents=True)
    for f in (source / mapping["ackscope"]).iterdir():
        (root / f.name).symlink_to(f.resolve())
    for package, folder in mapping.items():
        if package != "ackscope":
            (root / package.removeprefix("ackscope.")).symlink_to((source / folder).resolve(), target_is_directory=True)
    return ["env", f"PYTHONPATH={link}", sys.executable, "-c",
            f"import sys, ackscope; assert ackscope.__file__.startswith({str(link)!r}), ackscope.__file__; "
            "from ackscope.apps.cli import main; sys.exit(main())"]
