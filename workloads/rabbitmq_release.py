"""Which RabbitMQ a private node runs: the machine's own package, or the same package of a later Debian
installed in a root of its own (scripts/rabbitmq-roots.sh) with its own Erlang, started through chroot; and what
such a root needs before a node runs in it (its rabbitmq user's ids, /proc, /sys and /dev)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

RABBITMQ_SBIN = Path("/usr/lib/rabbitmq/bin")
# Where scripts/rabbitmq-roots.sh leaves the Debian roots, one folder per suite (trixie, sid).
ROOTS = Path(os.environ.get("ACKSCOPE_ROOTS", "/var/cache/ackscope/roots"))


class LocalBrokerError(RuntimeError):
    """The private node could not be installed, started or stopped."""


@dataclass(frozen=True)
class Release:
    """A RabbitMQ release the suite can start: the machine's own package (root None), or the one installed in
    a Debian root. `version` is the package's, as dpkg holds it (4.0.5-6+deb13u2)."""

    version: str
    root: Path | None = None

    @property
    def upstream(self) -> str:
        """The broker's own version, as it reports itself (4.0.5 of the package's 4.0.5-6+deb13u2)."""
        return self.version.split(":")[-1].split("-")[0]

    @property
    def name(self) -> str:
        """major.minor: what a behaviour that differs by release is looked up by."""
        return ".".join(self.upstream.split(".")[:2])

    @property
    def major(self) -> int:
        return int(self.name.split(".")[0])

    def at_least(self, major: int, minor: int = 0) -> bool:
        return tuple(int(x) for x in self.name.split(".")) >= (major, minor)

    @classmethod
    def host(cls) -> Release:
        return cls(_package_version(Path("/")))

    @classmethod
    def in_root(cls, suite: str) -> Release:
        """The release installed in the root of Debian `suite`, or LocalBrokerError saying how to build it."""
        root = ROOTS / suite
        ready = root / ".ackscope-ready"
        if not ready.exists():
            raise LocalBrokerError(f"no RabbitMQ root for Debian {suite} at {root}: run scripts/rabbitmq-roots.sh "
                                   f"{suite} as root (scripts/setup.sh --test does)")
        return cls(ready.read_text().strip(), root)


def _package_version(root: Path) -> str:
    """The rabbitmq-server package's version in `root`'s dpkg database."""
    done = subprocess.run(["dpkg-query", f"--admindir={root / 'var/lib/dpkg'}", "-W", "-f", "${Version}",
                           "rabbitmq-server"], capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout:
        raise LocalBrokerError(f"rabbitmq-server is not installed in {root}: run scripts/setup.sh as root")
    return done.stdout.strip()


def ensure_installed(root: Path | None = None) -> None:
    """Installing is setup's job (scripts/setup.sh, as root): here we only say what is missing."""
    if root is not None:
        if not (root / RABBITMQ_SBIN.relative_to("/") / "rabbitmq-server").exists():
            raise LocalBrokerError(f"rabbitmq-server is not installed in the root {root}: run "
                                   "scripts/rabbitmq-roots.sh as root")
    elif not (RABBITMQ_SBIN / "rabbitmq-server").exists():
        raise LocalBrokerError("rabbitmq-server is not installed: run scripts/setup.sh as root, or "
                               "apt-get install rabbitmq-server")


def root_user(root: Path, user: str) -> tuple[int, int]:
    """(uid, gid) of `user` in the root's own /etc/passwd: its package made the user, maybe with other ids."""
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise LocalBrokerError(f"no user {user} in {root}/etc/passwd: is rabbitmq-server installed there?")


def mount_kernel_filesystems(root: Path) -> None:
    """/proc, /sys and /dev inside the root, as Erlang and the node's scripts expect them (bound once; they
    stay for the next node started from the same root)."""
    for fs in ("proc", "sys", "dev"):
        target = root / fs
        if os.path.ismount(target):
            continue
        done = subprocess.run(["mount", "--bind", f"/{fs}", str(target)], capture_output=True, text=True)
        if done.returncode != 0:
            raise LocalBrokerError(f"cannot bind /{fs} into {root}: {done.stderr.strip()}")
