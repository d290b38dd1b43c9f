"""A private node's files and environment: rabbitmq.conf with its own listeners and settings, its plugins, its
Erlang cookie, and the RABBITMQ_* variables that point rabbitmq-server and rabbitmqctl at them instead of
/etc/rabbitmq and /var/lib/rabbitmq."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .ports import Ports

PLUGINS = ("rabbitmq_management", "rabbitmq_prometheus")


@dataclass(frozen=True)
class NodeConf:
    """How a user would configure the node. `statistics=False` as the official container image does:
    management statistics off (management_agent.disable_metrics_collector), the Prometheus plugin still on.
    `plugins`: both by default; ("rabbitmq_prometheus",) for a node with no management API at all.
    `net_ticktime`: seconds after which an unresponsive peer counts as down (Erlang's default 60). `config`: more
    rabbitmq.conf lines (RabbitMQ 4's deprecated_features.permit.* ...)."""

    stats_interval_ms: int = 500
    statistics: bool = True
    plugins: tuple[str, ...] = PLUGINS
    net_ticktime: int | None = None
    config: tuple[str, ...] = ()


def lay_out(base_dir: Path, ports: Ports, settings: NodeConf, cookie: str, owner: tuple[int, int] | None) -> None:
    """The node's directories and files under `base_dir`, owned by `owner` (uid, gid) when it runs as another
    user."""
    for sub in ("mnesia", "log", "home"):
        (base_dir / sub).mkdir(parents=True, exist_ok=True)
    (base_dir / "rabbitmq.conf").write_text(_conf(ports, settings))
    (base_dir / "enabled_plugins").write_text("[" + ",".join(settings.plugins) + "].\n")
    (base_dir / "rabbitmq-env.conf").write_text("")  # shadows /etc/rabbitmq/rabbitmq-env.conf
    cookie_file = base_dir / "home" / ".erlang.cookie"
    cookie_file.write_text(cookie)
    cookie_file.chmod(0o400)
    if owner:
        for path in [base_dir, *base_dir.rglob("*")]:
            os.chown(path, *owner)


def _conf(p: Ports, s: NodeConf) -> str:
    lines = [f"listeners.tcp.1 = 127.0.0.1:{p.amqp}",
             "management.tcp.ip = 127.0.0.1", f"management.tcp.port = {p.management}",
             "prometheus.tcp.ip = 127.0.0.1", f"prometheus.tcp.port = {p.prometheus}",
             f"collect_statistics_interval = {s.stats_interval_ms}",
             "log.console = false", "log.file.level = warning"]
    if not s.statistics:
        lines.append("management_agent.disable_metrics_collector = true")
    if s.net_ticktime is not None:
        lines.append(f"net_ticktime = {s.net_ticktime}")
    if any(plugin.startswith("rabbitmq_stream") for plugin in s.plugins):
        # The stream protocol listens on its own port and tells clients where to reach a stream's leader.
        lines += [f"stream.listeners.tcp.1 = 127.0.0.1:{p.stream}", "stream.advertised_host = 127.0.0.1",
                  f"stream.advertised_port = {p.stream}"]
    if "rabbitmq_mqtt" in s.plugins:
        lines.append(f"mqtt.listeners.tcp.1 = 127.0.0.1:{p.mqtt}")
    if "rabbitmq_stomp" in s.plugins:
        lines.append(f"stomp.listeners.tcp.1 = 127.0.0.1:{p.stomp}")
    return "".join(f"{line}\n" for line in [*lines, *s.config])


def node_env(node_dir: Path, nodename: str, ports: Ports, in_root: bool) -> dict[str, str]:
    """The environment of rabbitmq-server and rabbitmqctl for the node whose files are at `node_dir`, as the
    node sees that path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
    if in_root:  # the root's own tools, whatever the host's PATH holds
        env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    env.update(
        HOME=str(node_dir / "home"),
        RABBITMQ_NODENAME=nodename,
        RABBITMQ_NODE_PORT=str(ports.amqp),
        # Set explicitly: the default (AMQP port + 20000) overflows when the AMQP port is high.
        RABBITMQ_DIST_PORT=str(ports.dist),
        RABBITMQ_CONFIG_FILE=str(node_dir / "rabbitmq.conf"),
        RABBITMQ_ADVANCED_CONFIG_FILE=str(node_dir / "advanced.config"),
        RABBITMQ_CONF_ENV_FILE=str(node_dir / "rabbitmq-env.conf"),
        RABBITMQ_ENABLED_PLUGINS_FILE=str(node_dir / "enabled_plugins"),
        RABBITMQ_FEATURE_FLAGS_FILE=str(node_dir / "feature_flags"),
        RABBITMQ_MNESIA_BASE=str(node_dir / "mnesia"),
        RABBITMQ_LOG_BASE=str(node_dir / "log"),
        RABBITMQ_PID_FILE=str(node_dir / "beam.pid"),
        RABBITMQ_PLUGINS_EXPAND_DIR=str(node_dir / "plugins-expand"),
        ERL_EPMD_ADDRESS="127.0.0.1",
    )
    return env
