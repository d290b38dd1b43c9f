"""Following the node's log as `tail -F` does: a file across rotation and truncation, or standard input (a
container's log piped in, `kubectl logs -f`). Reads are bounded, so a burst of lines costs time, not memory."""

from __future__ import annotations

import os
import queue
import sys
import threading
from dataclasses import dataclass
from typing import BinaryIO

# One read takes at most this much; the caller reads again until nothing is left.
READ_BYTES = 1 << 20
# A longer line is cut here and counted as truncated: the parser needs its start, never a megabyte of it.
MAX_LINE = 64 * 1024


@dataclass(frozen=True)
class Batch:
    """What one read gave: whole lines (without their newline), how many were cut at MAX_LINE, and, when the log
    could not be read, why (one sentence, the same each time until it changes)."""

    lines: tuple[str, ...] = ()
    truncated: int = 0
    problem: str | None = None


class _Lines:
    """Bytes to whole lines, a partial last line kept for the next read (and cut at MAX_LINE)."""

    def __init__(self) -> None:
        self._partial = b""
        self._cutting = False  # the rest of an overlong line is dropped until its newline

    def feed(self, data: bytes) -> tuple[list[str], int]:
        # Decoded and split a chunk at a time, not a line at a time: at 10,000 lines a second the per-line work
        # was a sixth of the reading's cost. A line is cut at MAX_LINE characters.
        whole, newline, rest = (self._partial + data).rpartition(b"\n")
        lines: list[str] = []
        truncated = 0
        if newline:
            text = whole.decode("utf-8", "replace")
            lines = text.split("\n")
            if "\r" in text:
                lines = [line.rstrip("\r") for line in lines]
            if self._cutting:  # the rest of an overlong line
                self._cutting = False
                del lines[0]
            if len(text) > MAX_LINE and max(map(len, lines), default=0) > MAX_LINE:
                truncated = sum(len(line) > MAX_LINE for line in lines)
                lines = [line[:MAX_LINE] for line in lines]
        if len(rest) > MAX_LINE and not self._cutting:
            lines.append(rest[:MAX_LINE].decode("utf-8", "replace"))
            truncated += 1
            self._cutting, rest = True, b""
        elif self._cutting:
            rest = b""
        self._partial = rest
        return lines, truncated


class FileFollower:
    """The log file at `path`, from its end (what happens from now on) or, with `from_start`, from its start.

    Rotation (the name now holds another file): the old file is read to its end, then the new one from its
    start. Truncation in place (logrotate's copytruncate): read again from the start. A file that is missing
    or cannot be read is a `problem`, tried again at each read."""

    def __init__(self, path: str, from_start: bool = False):
        self.path = path
        self._file: BinaryIO | None = None
        self._inode: tuple[int, int] | None = None
        self._lines = _Lines()
        # From now: what the file holds when we start is the past. A file that appears later is read whole.
        self._open(at_end=not from_start)

    def read(self) -> Batch:
        problem = self._open_or_rewind()
        if self._file is None:
            return Batch(problem=problem)
        data = self._file.read(READ_BYTES)
        if not data and problem is None and self._replaced():
            # The old file is read to its end and the name holds a new one: go on there.
            self._open(at_end=False)
            data = self._file.read(READ_BYTES) if self._file else b""
        lines, truncated = self._lines.feed(data)
        return Batch(tuple(lines), truncated, problem)

    def close(self) -> None:
        if self._file:
            self._file.close()
            self._file = None

    def _open_or_rewind(self) -> str | None:
        """Open the file if it is not open (it was missing or unreadable: it is read whole once it is there), or
        go back to its start if it was truncated in place; what went wrong, if anything."""
        if self._file is None:
            return self._open(at_end=False)
        try:
            if os.fstat(self._file.fileno()).st_size < self._file.tell():
                self._file.seek(0)  # truncated in place: the partial line before it belonged to the old content
                self._lines = _Lines()
        except OSError as e:
            return f"the broker log {self.path} cannot be read: {e.strerror}"
        return None

    def _replaced(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False  # deleted, not yet replaced: keep the old file, which may still grow
        return (st.st_dev, st.st_ino) != self._inode

    def _open(self, at_end: bool) -> str | None:
        self.close()
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 — held open across reads, closed by close()
        except FileNotFoundError:
            return f"the broker log {self.path} does not exist (yet): it is looked for again at each poll"
        except OSError as e:
            return f"the broker log {self.path} cannot be read: {e.strerror}"
        st = os.fstat(self._file.fileno())
        self._inode = (st.st_dev, st.st_ino)
        if at_end:
            self._file.seek(0, os.SEEK_END)
        self._lines = _Lines()
        return None


class StreamFollower:
    """Lines from a stream (standard input), read by a thread of its own into a bounded queue of chunks of at
    most CHUNK_LINES lines: when the queue is full the thread waits and the pipe holds the rest (the writer
    slows; nothing is kept twice)."""

    CHUNK_LINES = 1000
    CHUNKS = 100

    def __init__(self, stream: BinaryIO | None = None):
        self._stream = stream or sys.stdin.buffer
        self._queue: queue.Queue[tuple[list[str], int] | None] = queue.Queue(maxsize=self.CHUNKS)
        self._ended = False
        threading.Thread(target=self._pump, name="broker-log-stdin", daemon=True).start()

    def _pump(self) -> None:
        lines = _Lines()
        read = getattr(self._stream, "read1", self._stream.read)  # read1: what has arrived, without waiting for more
        while chunk := read(READ_BYTES):
            got, truncated = lines.feed(chunk)
            for at in range(0, len(got), self.CHUNK_LINES):
                self._queue.put((got[at:at + self.CHUNK_LINES], truncated if at == 0 else 0))
        self._queue.put(None)

    def read(self) -> Batch:
        """What has arrived, up to 10 chunks: the caller reads again until a read gives nothing."""
        lines: list[str] = []
        truncated = 0
        for _ in range(10):
            if self._ended or self._queue.empty():
                break
            item = self._queue.get_nowait()  # the only reader: not empty stays not empty
            if item is None:
                self._ended = True
            else:
                lines += item[0]
                truncated += item[1]
        problem = "the broker log on standard input has ended" if self._ended and not lines else None
        return Batch(tuple(lines), truncated, problem)

    def close(self) -> None:
        """Nothing to release: the thread ends with standard input."""


def follow(path: str, from_start: bool = False) -> FileFollower | StreamFollower:
    """`--broker-log PATH`: "-" is standard input."""
    return StreamFollower() if path == "-" else FileFollower(path, from_start)
