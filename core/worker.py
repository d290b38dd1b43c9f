"""An object in a process of its own, called through a socket.

For work that would otherwise hold the exporter's interpreter: the applications' spans, 20,000 a second at the
benchmark's load, held the GIL about 7 ms in every 25, and each scrape waited for it (docs/benchmarks.md). In a
process of its own that work shares no interpreter with the scrapes, and a call waits on the socket, which holds
no GIL.

The worker is a fresh interpreter (`python -c`), never a fork of the exporter's threads, and not multiprocessing's
spawn, which would run the program's `__main__` again (`python -m ackscope` is the CLI itself). It is started at the
first call, so an exporter that is never sent spans costs no process, and again at a later call after it ended.
What the object logs in the worker comes back with each answer and is logged here by the same logger, so that the
exporter's log configuration is the only one. When the exporter dies, the worker reads the socket's end, closes
its object and ends.
"""

from __future__ import annotations

import copyreg
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from types import MappingProxyType
from typing import Any

from .processes import stop_process

log = logging.getLogger("ackscope.worker")

CLOSE = "close"  # the method called on the object before the worker ends, where the object has one


def _read_only(items: dict) -> MappingProxyType:
    return MappingProxyType(items)


# The model's frozen records hold read-only mappings; across the socket each is a read-only view of a copy.
copyreg.pickle(MappingProxyType, lambda m: (_read_only, (dict(m),)))


class WorkerGone(RuntimeError):
    """The worker ended during a call, or cannot be started yet: the call has no answer."""


class WorkerError(RuntimeError):
    """The call raised in the worker: its type and message (its traceback stays there)."""


class Worker:
    def __init__(self, build: Callable[[], Any], name: str, nice: int = 0, clock: Callable[[], float] = time.monotonic):
        """`build`: a picklable callable (a module's function or class, or a partial of one) that makes the object
        in the worker. `name`: what the log calls the process ("the traces worker"). `nice`: added to the
        worker's niceness, so that on a busy host the exporter's own threads (the scrapes) go first."""
        self._build, self.name, self._nice, self._clock = build, name, nice, clock
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._ended = ""  # why the last process ended
        self._failures = 0  # processes ended in a row, with no call answered between
        self._not_before = 0.0  # no new process before this (the clock's seconds): one that keeps ending costs little
        self.started = 0  # processes started: more than one means one ended

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def call(self, method: str, *args: Any) -> Any:
        """`method(*args)` on the object in the worker; one call at a time. Raises WorkerGone when the process
        ended during the call or cannot be started yet, WorkerError when the method raised."""
        with self._lock:
            if not self.running:
                self._start()
            assert self._conn is not None
            try:
                self._conn.send((method, args))
                ok, value, records = self._conn.recv()
            except (EOFError, OSError):
                raise WorkerGone(self._lost()) from None
            if self._failures:
                log.warning("%s answers again, after %d ended: what the ended ones held is not judged", self.name,
                            self._failures)
                self._failures = 0
        _relog(records)
        if not ok:
            raise WorkerError(value)
        return value

    def stop(self, timeout: float = 30.0) -> Any:
        """Close the object (its `close()`, whose answer this returns: None without one) and end the process;
        nothing when none runs."""
        with self._lock:
            if self._process is None or self._conn is None:
                return None
            value, records = None, []
            try:
                self._conn.send((CLOSE, ()))
                if self._conn.poll(timeout):
                    ok, value, records = self._conn.recv()
                    value = value if ok else None
            except (EOFError, OSError):
                pass
            self._conn.close()
            stop_process(self._process, timeout=5)  # it ends by itself once closed; SIGTERM is ignored there
            self._process = self._conn = None
        _relog(records)
        return value

    def _start(self) -> None:
        if self._process is not None:  # it ended between calls
            self._lost()
        wait = self._not_before - self._clock()
        if wait > 0:
            raise WorkerGone(f"{self._ended}; started again in {wait:.0f} s")
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", "from ackscope.core.worker import main; main()", str(theirs.fileno()),
                 str(logging.getLogger().getEffectiveLevel()), str(self._nice)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                start_new_session=True)  # a terminal's Ctrl-C is the exporter's to handle: it stops the worker
        except OSError as e:
            ours.close()
            raise WorkerGone(f"{self.name} could not be started: {e.strerror or e}") from None
        finally:
            theirs.close()
        self._process, self._conn = process, Connection(ours.detach())
        self.started += 1
        try:
            self._conn.send(self._build)
        except OSError:
            raise WorkerGone(self._lost()) from None

    def _lost(self) -> str:
        """Forget the process that ended: say why (the first of a run of ends), and hold the next start back: 1 s,
        twice as long at each end in a row, at most a minute."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        assert process is not None and conn is not None
        conn.close()
        how = f"exit code {stop_process(process, timeout=5)}"
        self._ended = f"{self.name} ended ({how})"
        self._failures += 1
        self._not_before = self._clock() + min(60.0, 2.0 ** (self._failures - 1))
        if self._failures == 1:
            log.error("%s; started again at the next call", self._ended)
        return self._ended


# -- in the worker ---------------------------------------------------------------------------------------------
class _Kept(logging.Handler):
    """The worker's log records, kept to go back with the next answer (the object's threads log too)."""

    def __init__(self, level: int):
        super().__init__(level)
        self.records: list[logging.LogRecord] = []
        self.taking = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None  # arguments may not pickle; the words do
        record.exc_info = record.exc_text = record.stack_info = None
        with self.taking:
            self.records.append(record)

    def take(self) -> list[logging.LogRecord]:
        with self.taking:
            taken, self.records = self.records, []
        return taken


def main() -> None:
    """The worker: `python -c 'from ackscope.core.worker import main; main()' FD LEVEL NICE`. The first message
    on the socket FD is the object's `build`; each after it a call, answered (ok, value, log records)."""
    # The exporter ends it (its last call closes the object); a service manager's SIGTERM to the whole group
    # must not end it before that.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.nice(int(sys.argv[3]))
    conn = Connection(int(sys.argv[1]))
    kept = _Kept(int(sys.argv[2]))
    root = logging.getLogger()
    root.handlers[:] = [kept]
    root.setLevel(int(sys.argv[2]))
    obj, broken = None, ""
    try:
        obj = conn.recv()()
    except EOFError:
        return
    except Exception as e:  # each call then raises WorkerError, saying why
        broken = f"{type(e).__name__}: {e}"
    while True:
        try:
            method, args = conn.recv()
        except (EOFError, OSError):  # the exporter is gone: keep what the object holds, then end
            if obj is not None and hasattr(obj, CLOSE):
                obj.close()
            return
        try:
            if obj is None:
                raise RuntimeError(f"the worker's object could not be made: {broken}")
            answer = (True, getattr(obj, method)(*args) if method != CLOSE or hasattr(obj, CLOSE) else None)
        except Exception as e:
            answer = (False, f"{type(e).__name__}: {e}")
        try:
            try:
                conn.send((*answer, kept.take()))
            except (pickle.PicklingError, TypeError, AttributeError) as e:  # an answer that cannot cross
                conn.send((False, f"the answer to {method} cannot be sent back: {e}", kept.take()))
        except OSError:
            return
        if method == CLOSE:
            return


def _relog(records: list[logging.LogRecord]) -> None:
    for record in records:
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)
