"""A private RabbitMQ node for the demo, the tests and the benchmarks.

It runs Debian's `rabbitmq-server` with its own node name, free ports, data directory, Erlang cookie and
feature-flags file, so it never touches a node that already runs on the default ports. The machine's own
package is one release; the others of the suite's matrix run from Debian roots (scripts/rabbitmq-roots.sh):
the same package of a later Debian, with its own Erlang, started through chroot (see Release).
"""

from __future__ import annotations

import os
import pwd
import random
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import requests

RABBITMQ_SBIN = Path("/usr/lib/rabbitmq/bin")
# Where scripts/rabbitmq-roots.sh leaves the Debian roots, one folder per suite (trixie, sid).
ROOTS = Path(os.environ.get("ACKSCOPE_ROOTS", "/var/cache/ackscope/roots"))
ROOT_SUITES = ("trixie", "sid")
PLUGINS = ("rabbitmq_management", "rabbitmq_prometheus")
# The broker's own default account; RabbitMQ lets it log in from loopback only.
ADMIN_USER = "guest"
ADMIN_PASSWORD = "guest"


class LocalBrokerError(RuntimeError):
    """The private node could not be installed, started or stopped."""


@dataclass(frozen=True)
class Release:
    """A RabbitMQ release the suite can start: the machine's own package (root None), or the one installed in
    a Debian root. `version` is the package's, as dpkg holds it (4.0.5-6+deb13u2)."""

    version: str
    root: Path | None = None

    @property
    def name(self) -> str:
        """major.minor: what a behaviour that differs by release is looked up by."""
        return ".".join(self.version.split(":")[-1].split(".")[:2])

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


def matrix() -> tuple[Release, ...]:
    """The releases the suite runs on: the machine's own, then each Debian root's."""
    return (Release.host(), *(Release.in_root(suite) for suite in ROOT_SUITES))


# ACKSCOPE_PORT_RANGE=LO-HI: where free_port looks. Processes given disjoint ranges below the kernel's ephemeral
# ones (the suite's parallel workers) can never pick the same port, nor one a client's connection is using.
_PORT_RANGE = os.environ.get("ACKSCOPE_PORT_RANGE")
_port_lock = threading.Lock()
_next_port: list[int] = []


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now: the kernel's choice, or the next free one of
    ACKSCOPE_PORT_RANGE, never the same twice from one process while the range lasts."""
    if not _PORT_RANGE:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    lo, hi = (int(end) for end in _PORT_RANGE.split("-"))
    with _port_lock:
        if not _next_port:  # a child process of a worker starts elsewhere in the range than its parent
            _next_port.append(random.randrange(lo, hi))
        for _ in range(hi - lo):
            port = _next_port[0]
            _next_port[0] = lo if port + 1 >= hi else port + 1
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise LocalBrokerError(f"no free port left in ACKSCOPE_PORT_RANGE={_PORT_RANGE}")


def ensure_rabbitmq_installed(root: Path | None = None) -> None:
    """Installing is setup's job (scripts/setup.sh, as root): here we only say what is missing."""
    if root is not None:
        if not (root / RABBITMQ_SBIN.relative_to("/") / "rabbitmq-server").exists():
            raise LocalBrokerError(f"rabbitmq-server is not installed in the root {root}: run "
                                   "scripts/rabbitmq-roots.sh as root")
    elif not (RABBITMQ_SBIN / "rabbitmq-server").exists():
        raise LocalBrokerError("rabbitmq-server is not installed: run scripts/setup.sh as root, or "
                               "apt-get install rabbitmq-server")


@dataclass(frozen=True)
class Ports:
    amqp: int
    dist: int
    management: int
    prometheus: int
    stream: int  # the stream protocol's, where the node enables rabbitmq_stream
    mqtt: int  # where it enables rabbitmq_mqtt
    stomp: int  # where it enables rabbitmq_stomp

    @classmethod
    def free(cls) -> Ports:
        return cls(*(free_port() for _ in range(7)))


class LocalBroker:
    """One RabbitMQ node under `base_dir`, started and stopped by this process."""

    def __init__(self, base_dir: Path | None = None, name: str = "ackscope", stats_interval_ms: int = 500,
                 statistics: bool = True, plugins: tuple[str, ...] = PLUGINS, cookie: str | None = None,
                 net_ticktime: int | None = None, release: Release | None = None, config: tuple[str, ...] = ()):
        """`statistics=False` configures the node as the official container image does: management
        statistics off (management_agent.disable_metrics_collector), the Prometheus plugin still on.
        `release`: the RabbitMQ to run (the machine's own package by default). `config`: more rabbitmq.conf
        lines, as a user would add them (RabbitMQ 4's deprecated_features.permit.* ...).
        `plugins` are the plugins it enables (both by default; ("rabbitmq_prometheus",) for a node that
        has no management API at all). `cookie`: the Erlang cookie it shares with the nodes of its cluster
        (by default one of its own). `net_ticktime`: seconds after which an unresponsive peer counts as down
        (Erlang's default 60)."""
        self.release = release or Release.host()
        self.root = self.release.root
        if base_dir is None:
            # The node runs as the rabbitmq user, which must be able to reach its files: a private
            # 0700 temp dir (pytest's, for one) would not do. A root's node sees only what is inside it.
            base_dir = Path(tempfile.mkdtemp(prefix=f"{name}-broker-", dir=self.root / "tmp" if self.root else None))
            base_dir.chmod(0o755)
        self.base_dir = Path(base_dir)
        self.ports = Ports.free()
        self.nodename = f"{name}-{self.ports.amqp}@localhost"
        self.stats_interval_ms = stats_interval_ms
        self.statistics = statistics
        self.plugins = plugins
        self.cookie = cookie or secrets.token_hex(16).upper()
        self.net_ticktime = net_ticktime
        self.config = config
        self._process: subprocess.Popen | None = None
        self._user = "rabbitmq" if os.geteuid() == 0 else None
        if self.root is not None and self._user is None:
            raise LocalBrokerError("a node from a Debian root is started through chroot, which needs root")

    # -- addresses -------------------------------------------------------------------------------------
    @property
    def management_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.management}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.prometheus}"

    def amqp_url(self, vhost: str = "/", user: str = ADMIN_USER, password: str = ADMIN_PASSWORD) -> str:
        quoted = requests.utils.quote(vhost, safe="")
        return f"amqp://{user}:{password}@127.0.0.1:{self.ports.amqp}/{quoted}"

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> None:
        """Start the node (first time: lay out its directories) and wait until its HTTP API answers."""
        ensure_rabbitmq_installed(self.root)
        if self.root is not None:
            _mount_kernel_filesystems(self.root)
        if not (self.base_dir / "rabbitmq.conf").exists():
            self._lay_out()
        with open(self.base_dir / "log" / "console.log", "ab") as log:
            self._process = subprocess.Popen(
                self._command("rabbitmq-server"),
                env=self._env(), cwd=self.base_dir, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, user=self._run_as, start_new_session=True,
            )
        self._wait_ready(timeout)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the node gracefully (SIGTERM to the VM), killing it if it does not stop in time."""
        pid = self.beam_pid()
        if pid:
            _signal(pid, signal.SIGTERM)
        self._reap(timeout)

    def kill(self) -> None:
        """kill -9 the Erlang VM: a crash, with no chance to fsync or close cleanly."""
        pid = self.beam_pid()
        if pid:
            _signal(pid, signal.SIGKILL)
        self._reap(30)

    def pause(self) -> None:
        """SIGSTOP the Erlang VM: to its peers, a node that stopped answering (as behind a broken network)."""
        pid = self.beam_pid()
        if pid:
            _signal(pid, signal.SIGSTOP)

    def resume(self) -> None:
        pid = self.beam_pid()
        if pid:
            _signal(pid, signal.SIGCONT)

    def restart(self, timeout: float = 120.0) -> None:
        self.stop()
        self.start(timeout)

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run rabbitmqctl against this node and return its output."""
        done = subprocess.run(
            self._command("rabbitmqctl", "-n", self.nodename, *args),
            env=self._env(), cwd=self.base_dir, capture_output=True, text=True, timeout=timeout,
            user=self._run_as,
        )
        if done.returncode != 0:
            raise LocalBrokerError(f"rabbitmqctl {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        """Call this node's management API as the administrator (for test setup, not for ackscope)."""
        r = requests.request(method, self.management_url + "/api" + path,
                             auth=(ADMIN_USER, ADMIN_PASSWORD), timeout=30, **kwargs)
        r.raise_for_status()
        return r

    def remove(self) -> None:
        shutil.rmtree(self.base_dir, ignore_errors=True)

    # -- internals -------------------------------------------------------------------------------------
    @property
    def _run_as(self) -> str | None:
        """The user Popen switches to: the node's, on the machine's own package; chroot switches for a root's."""
        return None if self.root is not None else self._user

    def _command(self, tool: str, *args: str) -> list[str]:
        path = str(RABBITMQ_SBIN / tool)
        if self.root is None:
            return [path, *args]
        entry = _root_user(self.root, self._user)
        return ["chroot", f"--userspec={entry[0]}:{entry[1]}", str(self.root), path, *args]

    def _inside(self, path: Path) -> Path:
        """`path` as the node sees it: under its root, the part below the root."""
        return path if self.root is None else Path("/") / path.resolve().relative_to(self.root.resolve())

    def _lay_out(self) -> None:
        if self._user:
            for parent in self.base_dir.resolve().parents:
                if not parent.stat().st_mode & 0o001:
                    raise LocalBrokerError(f"{parent} is not searchable by others; the {self._user} user "
                                           f"running the node could not reach {self.base_dir}")
        for sub in ("mnesia", "log", "home"):
            (self.base_dir / sub).mkdir(parents=True, exist_ok=True)
        p = self.ports
        (self.base_dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{p.amqp}\n"
            f"management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = {p.management}\n"
            f"prometheus.tcp.ip = 127.0.0.1\nprometheus.tcp.port = {p.prometheus}\n"
            f"collect_statistics_interval = {self.stats_interval_ms}\n"
            "log.console = false\nlog.file.level = warning\n"
            + ("" if self.statistics else "management_agent.disable_metrics_collector = true\n")
            + ("" if self.net_ticktime is None else f"net_ticktime = {self.net_ticktime}\n")
            # The stream protocol listens on its own port and tells clients where to reach a stream's leader.
            + (f"stream.listeners.tcp.1 = 127.0.0.1:{p.stream}\nstream.advertised_host = 127.0.0.1\n"
               f"stream.advertised_port = {p.stream}\n" if any(plugin.startswith("rabbitmq_stream")
                                                                for plugin in self.plugins) else "")
            + (f"mqtt.listeners.tcp.1 = 127.0.0.1:{p.mqtt}\n" if "rabbitmq_mqtt" in self.plugins else "")
            + (f"stomp.listeners.tcp.1 = 127.0.0.1:{p.stomp}\n" if "rabbitmq_stomp" in self.plugins else "")
            + "".join(f"{line}\n" for line in self.config)
        )
        (self.base_dir / "enabled_plugins").write_text("[" + ",".join(self.plugins) + "].\n")
        (self.base_dir / "rabbitmq-env.conf").write_text("")  # shadows /etc/rabbitmq/rabbitmq-env.conf
        cookie = self.base_dir / "home" / ".erlang.cookie"
        cookie.write_text(self.cookie)
        cookie.chmod(0o400)
        if self._user:
            if self.root is not None:
                uid, gid = _root_user(self.root, self._user)
            else:
                entry = pwd.getpwnam(self._user)
                uid, gid = entry.pw_uid, entry.pw_gid
            for path in [self.base_dir, *self.base_dir.rglob("*")]:
                os.chown(path, uid, gid)

    def _env(self) -> dict[str, str]:
        d, p = self._inside(self.base_dir), self.ports
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        if self.root is not None:  # the root's own tools, whatever the host's PATH holds
            env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
        env.update(
            HOME=str(d / "home"),
            RABBITMQ_NODENAME=self.nodename,
            RABBITMQ_NODE_PORT=str(p.amqp),
            # Set explicitly: the default (AMQP port + 20000) overflows when the AMQP port is high.
            RABBITMQ_DIST_PORT=str(p.dist),
            RABBITMQ_CONFIG_FILE=str(d / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(d / "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=str(d / "rabbitmq-env.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(d / "enabled_plugins"),
            RABBITMQ_FEATURE_FLAGS_FILE=str(d / "feature_flags"),
            RABBITMQ_MNESIA_BASE=str(d / "mnesia"),
            RABBITMQ_LOG_BASE=str(d / "log"),
            RABBITMQ_PID_FILE=str(d / "beam.pid"),
            RABBITMQ_PLUGINS_EXPAND_DIR=str(d / "plugins-expand"),
            ERL_EPMD_ADDRESS="127.0.0.1",
        )
        return env

    def beam_pid(self) -> int | None:
        try:
            return int((self.base_dir / "beam.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _wait_ready(self, timeout: float) -> None:
        """Wait until both the HTTP API (management, or else the Prometheus plugin) and the AMQP listener
        answer: the HTTP API comes up during boot, a moment before the node accepts AMQP connections."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process and self._process.poll() is not None:
                raise LocalBrokerError(f"node {self.nodename} exited while starting; see {self.base_dir}/log")
            if self._http_answers() and self._amqp_listens():
                return
            time.sleep(0.3)
        raise LocalBrokerError(f"node {self.nodename} did not answer on its HTTP port and AMQP port "
                               f"{self.ports.amqp} in {timeout:.0f}s")

    def _http_answers(self) -> bool:
        url = self.management_url + "/api/overview" if "rabbitmq_management" in self.plugins else \
            self.prometheus_url + "/metrics"
        try:
            return requests.get(url, auth=(ADMIN_USER, ADMIN_PASSWORD), timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def _amqp_listens(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.ports.amqp), timeout=2):
                return True
        except OSError:
            return False

    def _reap(self, timeout: float) -> None:
        pid = self.beam_pid()
        deadline = time.monotonic() + timeout
        while pid and _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid and _alive(pid):
            _signal(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
        if self._process:
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
            self._process = None
        (self.base_dir / "beam.pid").unlink(missing_ok=True)


class LocalCluster:
    """Private nodes joined into one cluster (`rabbitmqctl join_cluster`): the first is where the others join,
    each with its own ports and data directory, all with one Erlang cookie."""

    def __init__(self, size: int = 3, name: str = "ackscope-cluster", stats_interval_ms: int = 500,
                 statistics: bool = True, net_ticktime: int | None = None, release: Release | None = None):
        cookie = secrets.token_hex(16).upper()
        self.nodes = [LocalBroker(name=f"{name}{i + 1}", stats_interval_ms=stats_interval_ms,
                                  statistics=statistics, cookie=cookie, net_ticktime=net_ticktime, release=release)
                      for i in range(size)]

    def start(self, timeout: float = 180.0) -> None:
        """Start every node; the second and later join the first as disc nodes."""
        first, *rest = self.nodes
        first.start(timeout)
        for node in rest:
            node.start(timeout)
            node.ctl("stop_app")
            node.ctl("join_cluster", first.nodename)
            node.ctl("start_app")
        self.wait_running(len(self.nodes), timeout)

    def wait_running(self, count: int, timeout: float = 120.0) -> None:
        """Until a running node's management API lists `count` running members."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.nodes:
                try:
                    listed = node.api("GET", "/nodes", params={"columns": "name,running"}).json()
                except requests.RequestException:
                    continue
                if sum(1 for n in listed if n.get("running")) == count:
                    return
            time.sleep(0.5)
        raise LocalBrokerError(f"the cluster did not list {count} running nodes within {timeout:.0f}s")

    def restart_dead(self) -> None:
        """Start again every node whose VM is gone (killed by a test that then failed), and wait for all."""
        dead = [n for n in self.nodes if not (pid := n.beam_pid()) or not _alive(pid)]
        for node in dead:
            node.start()
        if dead:
            self.wait_running(len(self.nodes))

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()


def _root_user(root: Path, user: str) -> tuple[int, int]:
    """(uid, gid) of `user` in the root's own /etc/passwd: its package made the user, maybe with other ids."""
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise LocalBrokerError(f"no user {user} in {root}/etc/passwd: is rabbitmq-server installed there?")


def _mount_kernel_filesystems(root: Path) -> None:
    """/proc, /sys and /dev inside the root, as Erlang and the node's scripts expect them (bound once; they
    stay for the next node started from the same root)."""
    for fs in ("proc", "sys", "dev"):
        target = root / fs
        if os.path.ismount(target):
            continue
        done = subprocess.run(["mount", "--bind", f"/{fs}", str(target)], capture_output=True, text=True)
        if done.returncode != 0:
            raise LocalBrokerError(f"cannot bind /{fs} into {root}: {done.stderr.strip()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state in /proc says it is gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
