"""Finding the pipeline's input files and checking each before Spark reads it.

Files are listed through Hadoop's FileSystem, so DIR may be any Hadoop-compatible URI (file:, hdfs:, s3a:
with its connector on the classpath). Each file's Parquet footer is read in a Spark task: a half-written,
truncated, empty or foreign file is skipped and reported by name instead of failing the job, and the
footers give the row counts for summary.json without a pass over the data.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from urllib.parse import urlparse

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

# How pyarrow writes each logical type (the writers are ackscope.parquet_log).
_PHYSICAL = {pa.string(): "BYTE_ARRAY", pa.int64(): "INT64", pa.bool_(): "BOOLEAN", pa.float64(): "DOUBLE"}
_DATE_DIR = re.compile(r"(?:^|/)date=(\d{4}-\d{2}-\d{2})/")


@dataclass(frozen=True)
class Skipped:
    file: str  # relative to the input's root
    reason: str


@dataclass(frozen=True)
class DataFile:
    path: str  # as Hadoop qualifies it
    relative: str  # to the input's root
    rows: int  # as its footer says
    size: int = 0  # bytes
    span: tuple[int, int] | None = None  # its first and last time (µs since the epoch), from the footer's statistics


@dataclass(frozen=True)
class Input:
    """One input dataset: the files that passed their check, and those that did not."""
    name: str
    root: str
    files: tuple[DataFile, ...]
    rows: int
    skipped: tuple[Skipped, ...]
    changed: tuple[str, ...] = ()  # files seen before (`scan`'s `seen`) whose size is not what it was

    def without(self, damaged: DataFile, reason: str) -> Input:
        """This input with `damaged` moved to the skipped files."""
        return Input(self.name, self.root, tuple(f for f in self.files if f != damaged), self.rows - damaged.rows,
                     tuple(sorted((*self.skipped, Skipped(damaged.relative, reason)), key=lambda s: s.file)),
                     self.changed)

    def summary(self) -> dict:
        return {"root": self.root, "files_read": len(self.files), "rows": self.rows,
                "files_skipped": len(self.skipped),
                "skipped": [{"file": s.file, "reason": s.reason} for s in self.skipped]}


def spark_schema(schema: pa.Schema) -> T.StructType:
    """The Spark schema of one of ackscope's Parquet contracts."""
    types = {pa.string(): T.StringType(), pa.int64(): T.LongType(), pa.bool_(): T.BooleanType(),
             pa.float64(): T.DoubleType()}
    return T.StructType([T.StructField(f.name, T.TimestampType() if pa.types.is_timestamp(f.type) else types[f.type],
                                       f.nullable) for f in schema])


def scan(spark: SparkSession, name: str, root: str, schema: pa.Schema, since: date | None = None,
         until: date | None = None, added: frozenset[str] = frozenset(),
         seen: Mapping[str, int] | None = None) -> Input:
    """List and check the Parquet files under `root` (all of them, or the date= partitions that can hold
    events between `since` and `until`: a file's partition is the date of its first row, and a file spans at
    most one rotation, so one day either side is enough). A file without one of the `added` columns (written
    before the dataset gained it) passes, and is read with it null. Files in `seen` (relative path: size), read
    by an earlier incremental run, are left out; one whose size changed is listed in `changed`."""
    jvm = spark._jvm  # noqa: SLF001 - Hadoop's FileSystem is only reachable through the JVM
    path = jvm.org.apache.hadoop.fs.Path(root)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())  # noqa: SLF001
    if not fs.exists(path):
        return Input(name, root, (), 0, ())
    base = qualified(spark, root) + "/"
    expected = physical_types(schema)
    clock = next(f.name for f in schema if pa.types.is_timestamp(f.type))
    listing = fs.listFiles(path, True)
    candidates, changed = [], []
    while listing.hasNext():
        status = listing.next()
        full = status.getPath().toString()
        relative = full[len(base):] if full.startswith(base) else full
        if any(part.startswith((".", "_")) for part in relative.split("/")):
            continue  # a writer's temporary file, or Spark's _SUCCESS: not data, by Hadoop's convention
        if seen is not None and relative in seen:
            if seen[relative] != status.getLen():
                changed.append(relative)
            continue
        if _in_range(relative, since, until):
            candidates.append((full, relative, status.getLen()))
    candidates.sort()
    checks = []
    if candidates:
        # The footers are read where Spark runs its tasks: in parallel, and near the data on a cluster.
        work = [(full, size, expected, added, clock) for full, _, size in candidates]
        # Shipped by value: the executors need pyarrow, not ackscope.
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        slices = min(len(work), spark.sparkContext.defaultParallelism * 4)
        checks = spark.sparkContext.parallelize(work, slices).map(check_footer).collect()
    files, skipped, rows = [], [], 0
    for (full, relative, size), (problem, count, span) in zip(candidates, checks):
        if problem:
            skipped.append(Skipped(relative, problem))
        else:
            files.append(DataFile(full, relative, count, size, span))
            rows += count
    return Input(name, root, tuple(files), rows, tuple(skipped), tuple(sorted(changed)))


def qualified(spark: SparkSession, where: str) -> str:
    """`where` as Hadoop qualifies it (file:/…, hdfs://…), without a trailing slash: as the listing names files."""
    jvm = spark._jvm  # noqa: SLF001 - Hadoop's FileSystem is only reachable through the JVM
    path = jvm.org.apache.hadoop.fs.Path(where.rstrip("/") or "/")
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())  # noqa: SLF001
    return fs.makeQualified(path).toString().rstrip("/")


def read(spark: SparkSession, source: Input, schema: pa.Schema) -> DataFrame:
    """The checked files of `source` as one DataFrame (empty, with the schema, when there are none). Read with
    the dataset's schema, so that a column a file lacks (one added since) is null in its rows."""
    struct = spark_schema(schema)
    if not source.files:
        return spark.createDataFrame([], struct)
    return spark.read.schema(struct).parquet(*(f.path for f in source.files))


def _in_range(relative: str, since: date | None, until: date | None) -> bool:
    m = _DATE_DIR.search(relative)
    if not m:
        return True
    day = date.fromisoformat(m.group(1))
    return ((since is None or day >= since - timedelta(days=1))
            and (until is None or day <= until + timedelta(days=1)))


def physical_types(schema: pa.Schema) -> dict[str, str]:
    """Each column's Parquet physical type, as a file of `schema` has it in its footer."""
    return {f.name: "INT64" if pa.types.is_timestamp(f.type) else _PHYSICAL[f.type] for f in schema}


def check_footer(item: tuple[str, int, dict[str, str], frozenset[str], str]
                 ) -> tuple[str | None, int, tuple[int, int] | None]:
    """(why the file cannot be read, or None; its row count; the first and last value of its time column, in µs,
    where its statistics say), from its Parquet footer. Runs in Spark's Python workers, so it reads through
    pyarrow's file systems (local, HDFS, S3, GCS)."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    uri, size, expected, added, clock = item
    if not uri.endswith(".parquet"):
        return "not a .parquet file", 0, None
    if size == 0:
        return "empty file (0 bytes)", 0, None
    try:
        if uri.startswith("file:"):
            fs, path = pafs.LocalFileSystem(), urlparse(uri).path
        else:
            fs, path = pafs.FileSystem.from_uri(re.sub(r"^s3a://", "s3://", uri))
        with fs.open_input_file(path) as f:
            meta = pq.ParquetFile(f).metadata
    except (OSError, pa.ArrowException) as e:
        message = str(e)
        if "magic bytes not found" in message or "smaller than the minimum file footer" in message:
            return f"not a complete Parquet file ({size} bytes, no valid footer: half-written or cut short)", 0, None
        return f"unreadable Parquet footer: {message.splitlines()[0] if message else type(e).__name__}", 0, None
    found = {meta.schema.column(i).name: meta.schema.column(i).physical_type for i in range(meta.num_columns)}
    missing = [n for n in expected if n not in found and n not in added]
    if missing:
        return f"not this dataset's schema: no column {', '.join(missing)}", 0, None
    wrong = [f"{n} is {found[n]}, expected {t}" for n, t in expected.items() if n in found and found[n] != t]
    if wrong:
        return f"not this dataset's schema: {'; '.join(wrong)}", 0, None
    return None, meta.num_rows, _span(meta, list(found).index(clock))


def _span(meta, column: int) -> tuple[int, int] | None:
    """The time column's least and greatest value over the row groups (raw INT64: µs, as the writers store it),
    or None where a row group has no statistics."""
    lows, highs = [], []
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max:
            return None
        lows.append(stats.min_raw)
        highs.append(stats.max_raw)
    return (min(lows), max(highs)) if lows else None
