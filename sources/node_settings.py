"""The node's own configuration, which no HTTP endpoint shows, read with its CLI (`--cli`): the consumer timeout
it applies where neither a consumer nor its queue sets one. rabbitmqctl starts an Erlang VM (a second or more),
and a node's configuration changes only when it restarts (or an operator's `rabbitmqctl eval`): so it is read in
the background, at the first poll and every REFRESH_SECONDS after, and no poll waits for it. When the CLI fails, the
settings last read stay, and the trouble is said once."""

from __future__ import annotations

import logging
import re
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor

from ackscope.model.snapshot import NodeSettings

from .cli import run

log = logging.getLogger("ackscope.sources")

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


class NodeSettingsReader:
    def __init__(self, command: list[str], timeout: float = 30.0, refresh_seconds: float = REFRESH_SECONDS):
        self.command = command
        self.timeout = timeout
        self.refresh_seconds = refresh_seconds
        self._settings: NodeSettings | None = None
        self._read_at: float | None = None  # monotonic time of the last attempt
        self._running: Future | None = None
        self._failing: str | None = None
        self._closed = False  # a read still running when the exporter stops says nothing after it
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ackscope-settings")

    def latest(self, first_by: float | None = None) -> NodeSettings | None:
        """The settings last read; starts a read when one is due. Until a first read has answered, waits for it
        until the monotonic time `first_by` (then None, when it has not answered by then)."""
        now = time.monotonic()
        due = self._read_at is None or now - self._read_at >= self.refresh_seconds
        if due and (self._running is None or self._running.done()):
            self._read_at = now
            self._running = self._pool.submit(self._read)
        if self._settings is None and first_by is not None and self._running is not None:
            try:
                self._running.result(timeout=max(0.0, first_by - now))
            except TimeoutError:
                pass  # said by the read itself when it fails; a slow first read is there at a later poll
        return self._settings

    def _read(self) -> None:
        try:
            self._settings = parse(run(self.command, ("eval", EXPRESSION), self.timeout))
        except (OSError, subprocess.SubprocessError, ValueError, RuntimeError) as e:
            message = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            if message != self._failing and not self._closed:
                log.warning("the node's settings (%s) not read%s: %s", self.command[0],
                            ", those read before kept" if self._settings is not None else "", message)
                self._failing = message
            return
        if self._failing is not None:
            log.info("the node's settings (%s) read again", self.command[0])
            self._failing = None

    def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
