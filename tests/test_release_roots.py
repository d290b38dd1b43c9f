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
