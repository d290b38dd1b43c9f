"""Containers run as a user runs them: podman (through scripts/podman.sh, the runtime this machine allows), the
image built by scripts/container-image.sh, secrets as mounted files, a data volume owned by the image's user."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PODMAN = str(REPO / "scripts" / "podman.sh")
USER_ID = 10001  # the image's ackscope user (deploy/container/Containerfile)


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        pytest.fail(f"podman {' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return done


def build(*args: str) -> str:
    """Run scripts/container-image.sh; the image it names in its last line."""
    done = subprocess.run(["bash", str(REPO / "scripts" / "container-image.sh"), *args], capture_output=True,
                          text=True, timeout=900)
    if done.returncode != 0:
        pytest.fail(f"scripts/container-image.sh {' '.join(args)}: {done.stderr.strip()[-1500:]}")
    return done.stdout.strip().splitlines()[-1].split()[1]


def image_size_mib(image: str) -> float:
    return int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout) / 2**20


def secret_file(directory: Path, name: str, value: str, owner: int = USER_ID, mode: int = 0o400) -> Path:
    """A secret as Kubernetes mounts one: a file only its reader (the image's user) may read."""
    path = directory / name
    path.write_text(value)
    os.chown(path, owner, owner)
    path.chmod(mode)
    return path


def data_volume(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    os.chown(directory, USER_ID, USER_ID)
    return directory


@contextmanager
def container(image: str, *command: str, env: dict[str, str] | None = None, mounts: tuple[str, ...] = (),
              options: tuple[str, ...] = ()) -> Iterator[str]:
    """A detached container as Kubernetes runs one with readOnlyRootFilesystem: no writable /tmp, and the
    image's VOLUME no volume unless one is mounted (podman would make one); removed at the end. Yields its
    name."""
    name = f"ackscope-test-{uuid.uuid4().hex[:8]}"
    args = ["run", "--detach", "--name", name, "--read-only", "--read-only-tmpfs=false", "--image-volume=ignore",
            *options]
    for key, value in (env or {}).items():
        args += ["--env", f"{key}={value}"]
    for mount in mounts:
        args += ["--volume", mount]
    podman(*args, image, *command)
    try:
        yield name
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


def exit_code(name: str, timeout: float = 60) -> int:
    return int(podman("wait", name, timeout=timeout).stdout.strip())


def logs(name: str) -> list[str]:
    """What the container wrote (stdout and stderr), a line each."""
    done = podman("logs", name)
    return (done.stdout + done.stderr).splitlines()
