"""Incremental runs (`ackscope pipeline --incremental`): each run reads only the event files no earlier run read,
and keeps under OUT/_state/ what the reports need of the ones before, so that its reports equal those of a full
run over all the files.

The audit's per-message aggregates (earliest times, counts) of every event read so far are kept in buckets: one
per run, probe and range of 2^18 sequence numbers, OUT/_state/messages-N/bucket=B/, where N is the run that last
wrote bucket B. A run merges into the buckets its new events reach and no other, so that its cost follows what it
reads, not the history: a message whose story spans files is judged whole. The manifest names each bucket's run.

The state of run N, OUT/_state/gen-N/ (Parquet), each part combined exactly with what the new files add:
- per bucket, what the audit needs of its messages: `totals` (the counts each message's own story decides),
  `undelivered` (the messages confirmed and never delivered: awaiting until their loss deadline passes within the
  log, then lost, as in a full run; judged again at every run, since the deadline moves with the run's end) and
  `out_of_order` (the messages first delivered out of publish order). The buckets a run does not reach keep theirs.
- `order_marks`: per run, probe and consumer, the latest-published message first delivered to it: the new files'
  deliveries are judged in order against it (their files come later: the log rotates by time).
- `run_ends`: each run's last event, which moves its messages' deadlines.
- `batch_counts`: messages confirmed per frame size; `frames`: each multi-message confirm frame with the interval
  since the one before it (the report is a percentile over all of them; a run adds its frames' intervals), and
  `frame_ends`, each run's last frame.
- `windows/<report>`: the rows of the windowed reports. A run recomputes only the windows its new files reach,
  from the new files and those earlier files whose time span (their footers' statistics) overlaps them.
- the snapshot history's reports' parts (pipeline/snapshots.py): per channel its samples' counts and extremes
  (`saturation`), its consumers' queues (`consumer_queues`), per queue its redeliveries (`hotspots`), per window
  and channel what it published (`safety`); and each channel's and queue's last sample (`channels_last`,
  `queues_last`), from which the counters of its next sample count.

OUT/_state/manifest-N.json commits run N: the files read (size, rows, time span), the buckets' runs, the input and
the options. It is written last, after gen-N, messages-N and the reports: a run that dies before it leaves them
behind, which the next run removes before it starts again from N-1, so nothing is lost or counted twice. Once it
is written, the buckets it superseded are removed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from .inputs import DataFile, Input

STATE = "_state"
FORMAT = 3  # 2: the order audit (order_marks; messages with republished_at and out-of-order counts); 3: buckets
PARTS = ("totals", "undelivered", "out_of_order", "order_marks", "run_ends", "batch_counts", "frames", "frame_ends",
         "saturation", "consumer_queues", "hotspots", "safety", "channels_last", "queues_last")
WINDOWED = ("confirm_latency", "delivery_latency", "redelivery")
# The inputs each part (and each report) is made of; the rest are made of the probes' events alone. A run with no
# new file in any of a part's inputs carries it from the run before as it was, instead of computing and writing it
# again unchanged: a run of new probe events leaves the snapshot history's parts and reports alone, and the
# other way round.
_MADE_OF = {"saturation": ("snapshots/channels",), "consumer_queues": ("snapshots/consumers",),
            "hotspots": ("snapshots/queues",), "safety": ("snapshots/channels",),
            "channels_last": ("snapshots/channels",), "queues_last": ("snapshots/queues",),
            "prefetch_saturation": ("snapshots/channels", "snapshots/consumers"),
            "redelivery_hotspots": ("snapshots/queues",), "publisher_safety": ("snapshots/channels",),
            "trace_audit": ("traces/messages",), "trace_queue_time": ("traces/messages",)}
_MANIFEST = re.compile(r"^manifest-(\d{6})\.json$")
_MESSAGES = re.compile(r"^messages-(\d{6})$")
BUCKET_BITS = 18  # sequence numbers per bucket: 2^18; a probe publishing 10 a second fills one in 7 hours
_MAX_INTERVALS = 64  # more windows' ranges than this are read as one range: a filter of that size costs more


class StateRefused(Exception):
    """The state under OUT/_state cannot be used: damaged, or made from other input or options. One line."""


@dataclass(frozen=True)
class Manifest:
    generation: int
    data_dir: str  # as Hadoop qualifies it
    window_s: int
    loss_deadline_s: float
    # input name -> relative path -> [size, rows, first µs or None, last µs or None]
    files: Mapping[str, Mapping[str, list]] = field(default_factory=dict)
    summary: Mapping[str, Any] = field(default_factory=dict)
    buckets: Mapping[str, int] = field(default_factory=dict)  # bucket -> the run that last wrote it

    def seen(self, name: str) -> dict[str, int]:
        return {relative: entry[0] for relative, entry in self.files.get(name, {}).items()}

    def data_files(self, name: str, root: str) -> list[DataFile]:
        """The files of input `name` read by earlier runs, as DataFiles under `root` (qualified)."""
        base = root.rstrip("/") + "/"
        return [DataFile(base + relative, relative, rows, size, (first, last) if first is not None else None)
                for relative, (size, rows, first, last) in sorted(self.files.get(name, {}).items())]


def with_files(manifest: Manifest | None, generation: int, data_dir: str, window_s: int, loss_deadline_s: float,
               inputs: Mapping[str, Input], summary: Mapping[str, Any], touched: list[str]) -> Manifest:
    """The manifest of run `generation`: the files of `manifest` and the ones `inputs` read now, the buckets of
    `manifest` and the ones this run wrote (`touched`)."""
    files = {name: dict(entries) for name, entries in (manifest.files if manifest else {}).items()}
    for name, source in inputs.items():
        entries = files.setdefault(name, {})
        for f in source.files:
            entries[f.relative] = [f.size, f.rows, *(f.span or (None, None))]
    buckets = {**(manifest.buckets if manifest else {}), **{b: generation for b in touched}}
    return Manifest(generation, data_dir, window_s, loss_deadline_s, files, summary, buckets)


def made_of(name: str) -> tuple[str, ...]:
    """The inputs (as the pipeline names them: "events", "snapshots/channels" ...) that part or report `name` is
    made of."""
    return _MADE_OF.get(name, ("events",))


def bucket_of() -> Column:
    """The bucket of an event's or a message's (run_id, probe, seq): a name safe in a path."""
    run = F.substring(F.sha1(F.concat_ws("\n", "run_id", "probe")), 1, 16)
    return F.concat_ws("-", run, F.shiftright(F.col("seq"), BUCKET_BITS).cast("string"))


class Store:
    """OUT/_state through Hadoop's FileSystem (OUT may be any Hadoop URI)."""

    def __init__(self, spark: SparkSession, out: str):
        self.spark = spark
        self.root = f"{out.rstrip('/')}/{STATE}"
        jvm = spark._jvm  # noqa: SLF001 - Hadoop's FileSystem is only reachable through the JVM
        self._path = jvm.org.apache.hadoop.fs.Path
        self.fs = self._path(self.root).getFileSystem(spark._jsc.hadoopConfiguration())  # noqa: SLF001

    def gen(self, generation: int) -> str:
        return f"{self.root}/gen-{generation:06d}"

    def messages(self, generation: int) -> str:
        return f"{self.root}/messages-{generation:06d}"

    def buckets_in(self, generation: int) -> list[str]:
        """The buckets messages-`generation` holds."""
        where = self._path(self.messages(generation))
        if not self.fs.exists(where):
            return []
        return sorted(n.removeprefix("bucket=") for s in self.fs.listStatus(where)
                      if (n := s.getPath().getName()).startswith("bucket="))

    def bucket_paths(self, buckets: Mapping[str, int], wanted: list[str]) -> list[str]:
        """Where the `wanted` buckets that `buckets` (bucket -> run) holds are."""
        return [f"{self.messages(buckets[b])}/bucket={b}" for b in wanted if b in buckets]

    def carry(self, name: str, generation: int) -> None:
        """Part `name` of run `generation` - 1, copied as it is into run `generation` (which must not lose it when
        the run before is removed at its commit)."""
        jvm = self.spark._jvm  # noqa: SLF001 - Hadoop's FileUtil, as for the FileSystem
        conf = self.spark._jsc.hadoopConfiguration()  # noqa: SLF001
        source, target = (self._path(f"{self.gen(g)}/{name}") for g in (generation - 1, generation))
        if not jvm.org.apache.hadoop.fs.FileUtil.copy(self.fs, source, self.fs, target, False, conf):
            raise OSError(f"could not copy {source} to {target}")

    def written_whole(self, where: str, by_date: bool) -> bool:
        """Whether a report's last write to `where` was committed: its _SUCCESS marker, which a run killed while
        writing leaves none of. Partitioned by date, the report is there: Spark replaces each date's directory
        whole, and leaves no marker."""
        return bool(self.fs.exists(self._path(where if by_date else f"{where}/_SUCCESS")))

    def _names(self) -> list[str]:
        path = self._path(self.root)
        return [s.getPath().getName() for s in self.fs.listStatus(path)] if self.fs.exists(path) else []

    def remove(self) -> None:
        self.fs.delete(self._path(self.root), True)

    def load(self, data_dir: str, window_s: int, loss_deadline_s: float) -> Manifest | None:
        """The last committed run's manifest (None before the first), after removing what a run that died left;
        StateRefused where it is damaged or was made from other input or options."""
        names = self._names()
        committed = sorted(int(m.group(1)) for n in names if (m := _MANIFEST.match(n)))
        last = committed[-1] if committed else None
        for n in names:  # a run that died: its generation, its manifest's temporary file
            m = re.match(r"^(?:gen-|_manifest-|messages-)(\d{6})", n)
            if m and (last is None or int(m.group(1)) > last):
                self.fs.delete(self._path(f"{self.root}/{n}"), True)
        if last is None:
            return None
        where = f"{self.root}/manifest-{last:06d}.json"
        try:
            raw = json.loads(self._read(where))
            if not isinstance(raw, dict):
                raise ValueError("not a JSON object")
            if raw.get("format") != FORMAT:
                raise StateRefused(f"the incremental state under {self.root} was written in format "
                                   f"{raw.get('format')!r}, and this ackscope keeps format {FORMAT}: run with "
                                   "--rebuild to start over")
            manifest = Manifest(int(raw["generation"]), str(raw["data_dir"]), int(raw["window_s"]),
                                float(raw["loss_deadline_s"]), raw["files"], raw.get("summary", {}),
                                {str(b): int(g) for b, g in raw["buckets"].items()})
        except (ValueError, KeyError, TypeError, Py4JJavaError) as e:
            # Hadoop's own checksum may be first to find the damage (Py4JJavaError), or the JSON.
            why = e.java_exception.getMessage() if isinstance(e, Py4JJavaError) else str(e)
            raise StateRefused(f"the incremental state under {self.root} is damaged ({where}: "
                               f"{why.splitlines()[0] if why else type(e).__name__}): run with --rebuild to start "
                               "over") from None
        if not self.fs.exists(self._path(self.gen(last))):
            raise StateRefused(f"the incremental state under {self.root} is damaged (gen-{last:06d} is missing): "
                               "run with --rebuild to start over")
        if manifest.data_dir != data_dir:
            raise StateRefused(f"the incremental state under {self.root} was built from {manifest.data_dir}, not "
                               f"{data_dir}: give each input its own --out, or run with --rebuild to start over")
        if (manifest.window_s, manifest.loss_deadline_s) != (window_s, loss_deadline_s):
            raise StateRefused(f"the incremental state under {self.root} was built with --window "
                               f"{manifest.window_s}s --loss-deadline {manifest.loss_deadline_s:g}, not --window "
                               f"{window_s}s --loss-deadline {loss_deadline_s:g}: run with those, or with "
                               "--rebuild to start over")
        return manifest

    def commit(self, manifest: Manifest) -> None:
        """Make `manifest`'s run the committed one (write, then rename: atomic), then drop the runs before it."""
        body = {"format": FORMAT, "generation": manifest.generation, "data_dir": manifest.data_dir,
                "window_s": manifest.window_s, "loss_deadline_s": manifest.loss_deadline_s,
                "files": manifest.files, "summary": manifest.summary, "buckets": manifest.buckets}
        final = f"{self.root}/manifest-{manifest.generation:06d}.json"
        temporary = f"{self.root}/_manifest-{manifest.generation:06d}.json"
        self._write(temporary, json.dumps(body, sort_keys=True))
        if not self.fs.rename(self._path(temporary), self._path(final)):
            raise OSError(f"could not rename {temporary} to {final}")
        for n in self._names():
            m = _MANIFEST.match(n) or re.match(r"^gen-(\d{6})$", n)
            if m and int(m.group(1)) < manifest.generation:
                self.fs.delete(self._path(f"{self.root}/{n}"), True)
            elif (m := _MESSAGES.match(n)) and int(m.group(1)) < manifest.generation:
                self._superseded(int(m.group(1)), manifest.buckets)

    def _superseded(self, generation: int, buckets: Mapping[str, int]) -> None:
        """Remove what messages-`generation` holds that a later run wrote again (all of it, where nothing is left)."""
        where = self.messages(generation)
        if generation not in buckets.values():
            self.fs.delete(self._path(where), True)
            return
        for status in self.fs.listStatus(self._path(where)):
            name = status.getPath().getName()
            if name.startswith("bucket=") and buckets.get(name.removeprefix("bucket=")) != generation:
                self.fs.delete(status.getPath(), True)

    def _read(self, where: str) -> str:
        stream = self.fs.open(self._path(where))
        try:
            return bytes(self.spark._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)).decode()  # noqa: SLF001
        finally:
            stream.close()

    def _write(self, where: str, text: str) -> None:
        stream = self.fs.create(self._path(where), True)
        try:
            stream.write(bytearray(text.encode()))
        finally:
            stream.close()


def window_ranges(files: list[DataFile], window_s: int) -> list[tuple[int, int]] | None:
    """The windows (µs, [start, end)) the events of `files` fall in, merged; None where a file's span is not
    known (then every window is recomputed)."""
    width = window_s * 1_000_000
    spans = []
    for f in files:
        if f.span is None:
            return None
        spans.append(((f.span[0] // width) * width, (f.span[1] // width + 1) * width))
    merged: list[list[int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    if len(merged) > _MAX_INTERVALS:
        return [(merged[0][0], merged[-1][1])]
    return [(lo, hi) for lo, hi in merged]


def overlapping(files: list[DataFile], ranges: list[tuple[int, int]] | None) -> list[DataFile]:
    """The `files` that may hold events in `ranges` (all of them where a span or the ranges are not known)."""
    if ranges is None:
        return files
    return [f for f in files if f.span is None or any(f.span[0] < hi and f.span[1] >= lo for lo, hi in ranges)]


def in_ranges(column: str, ranges: list[tuple[int, int]]) -> Column:
    micros = F.unix_micros(F.col(column))
    condition = F.lit(False)
    for lo, hi in ranges:
        condition = condition | ((micros >= lo) & (micros < hi))
    return condition
