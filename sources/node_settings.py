"""The node's own configuration, which no HTTP endpoint shows, read with its CLI (`--cli`): the consumer timeout
it applies where neither a consumer nor its queue sets one. rabbitmqctl starts an Erlang VM (a second or more),
and a node's configuration changes only when it restarts (or an operator's `rabbitmqctl eval`): so it is read in
the background (refresh.py), at the first poll and every REFRESH_SECONDS after."""

from __future__ import annotations

import re
import subprocess

from ackscope.model.snapshot import NodeSettings

from .cli import run
from .refresh import Refreshed

REFRESH_SECONDS = 300.0
EXPRESSION = "{node(), application:get_env(rabbit, consumer_timeout)}."
# {'rabbit@host',{ok,1800000}}, {'rabbit@host',{ok,undefined}} or {rabbit@host,undefined} (3.10 to 4.3 alike)
_ANSWER = re.compile(r"\{'?(?P<node>[^',{}]+)'?,(?:\{ok,(?P<value>[^{}]+)\}|undefined)\}")


def parse(output: str) -> NodeSettings:
    """Pure: the CLI's answer to EXPRESSION (ValueError when it is something else)."""
    found = _ANSWER.fullmatch(output.strip())
    if found is None:
        raise ValueError(f"an answer that is not the node's settings: {output.strip()[:80]!r}")
    value = found["value"]
    return NodeSettings(found["node"], int(value) if value is not None and value.isdigit() else None)


def reader(command: list[str], timeout: float = 30.0,
           refresh_seconds: float = REFRESH_SECONDS) -> Refreshed[NodeSettings]:
    """The node's settings, read in the background with `command` (rabbitmqctl and its options)."""
    return Refreshed(f"the node's settings ({command[0]})", lambda: parse(run(command, ("eval", EXPRESSION), timeout)),
                     refresh_seconds, (OSError, subprocess.SubprocessError, ValueError, RuntimeError))
