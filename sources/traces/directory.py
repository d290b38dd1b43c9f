"""The OpenTelemetry Collector's file exporter's output (`--traces-dir`), for a setup with no network path from the
Collector to ackscope: each file in the folder holds one OTLP/JSON ExportTraceServiceRequest per line.

Each file is followed by its identity (device and inode), not its name: the file exporter's rotation renames the
file it wrote and starts a new one, and the renamed one is read to its end first. Each read is bounded; a line
past the size limit or of malformed JSON is counted as a refused request, and the lines after it are read.
"""

from __future__ import annotations

import logging
import os
import time

from .decode import JSON, BadRequest, decode
from .receiver import TraceReceiver

log = logging.getLogger("ackscope.traces")

READ_BYTES = 64 << 20  # read at most this much per poll across the folder's files: a backlog costs polls, not memory


class TraceDirectory:
    def __init__(self, path: str, receiver: TraceReceiver):
        self.path, self.receiver = path, receiver
        self._offsets: dict[tuple[int, int], int] = {}
        self._partial: dict[tuple[int, int], bytes] = {}
        self.problem: str | None = None

    def read(self, now: float | None = None) -> None:
        """Take in what the files gained since the last read (a file that appeared: whole)."""
        now = time.time() if now is None else now
        try:
            names = sorted(os.scandir(self.path), key=lambda e: e.stat().st_mtime)
        except OSError as e:
            self._say(f"--traces-dir {self.path} cannot be read: {e.strerror}")
            return
        self._say(None)
        budget, seen = READ_BYTES, set()
        for entry in names:
            if not entry.is_file() or budget <= 0:
                continue
            st = entry.stat()
            identity = (st.st_dev, st.st_ino)
            seen.add(identity)
            offset = self._offsets.get(identity, 0)
            if st.st_size < offset:
                offset, self._partial[identity] = 0, b""  # truncated in place: read again from the start
            if st.st_size == offset:
                continue
            try:
                with open(entry.path, "rb") as f:
                    f.seek(offset)
                    data = f.read(min(budget, st.st_size - offset))
            except OSError as e:
                self._say(f"{entry.path} cannot be read: {e.strerror}")
                continue
            budget -= len(data)
            self._offsets[identity] = offset + len(data)
            self._lines(identity, data, now)
        for gone in set(self._offsets) - seen:  # deleted files: nothing more will come from them
            self._offsets.pop(gone, None)
            self._partial.pop(gone, None)

    def _lines(self, identity: tuple[int, int], data: bytes, now: float) -> None:
        whole, newline, rest = (self._partial.get(identity, b"") + data).rpartition(b"\n")
        if len(rest) > self.receiver.max_request_bytes:
            self.receiver.refuse(413, f"a line in --traces-dir {self.path} is longer than "
                                      f"{self.receiver.max_request_bytes} bytes")
            rest = b""
        self._partial[identity] = rest
        if not newline:
            return
        for line in whole.split(b"\n"):
            if not line.strip():
                continue
            try:
                request = decode(line, JSON)
            except BadRequest as e:
                self.receiver.refuse(400, f"a line in --traces-dir {self.path}: {e}")
                continue
            self.receiver.take(request, now)

    def _say(self, problem: str | None) -> None:
        if problem is not None and problem != self.problem:
            log.warning("%s; tried again at each poll", problem)
        elif problem is None and self.problem is not None:
            log.info("--traces-dir %s can be read again", self.path)
        self.problem = problem
