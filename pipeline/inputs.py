"""Finding the pipeline's input files and checking each before Spark reads it.

Files are listed through Hadoop's FileSystem, so DIR may be any Hadoop-compatible URI (file:, hdfs:, s3a:
with its connector on the classpath). Each file's Parquet footer is read on the driver: a half-written,
truncated, empty or foreign file is skipped and reported by name instead of failing the job, and the
footers give the row counts for summary.json without a pass over the data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

# How pyarrow writes each logical type (the writers are ackscope.parquet_log).
_PHYSICAL = {pa.string(): "binary", pa.int64(): "int64", pa.bool_(): "boolean", pa.float64(): "double"}
_COLUMN = re.compile(r"^\s*(?:required|optional|repeated)\s+(\w+)\s+([^\s(;]+)", re.MULTILINE)
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


@dataclass(frozen=True)
class Input:
    """One input dataset: the files that passed their check, and those that did not."""
    name: str
    root: str
    files: tuple[DataFile, ...]
    rows: int
    skipped: tuple[Skipped, ...]

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
         until: date | None = None) -> Input:
    """List and check the Parquet files under `root` (all of them, or the date= partitions that can hold
    events between `since` and `until`: a file's partition is the date of its first row, and a file spans at
    most one rotation, so one day either side is enough)."""
    jvm = spark._jvm  # noqa: SLF001 - Hadoop's FileSystem is only reachable through the JVM
    conf = spark._jsc.hadoopConfiguration()  # noqa: SLF001
    path = jvm.org.apache.hadoop.fs.Path(root)
    fs = path.getFileSystem(conf)
    if not fs.exists(path):
        return Input(name, root, (), 0, ())
    base = fs.makeQualified(path).toString().rstrip("/") + "/"
    expected = {f.name: "int64" if pa.types.is_timestamp(f.type) else _PHYSICAL[f.type] for f in schema}
    files, skipped, rows = [], [], 0
    listing = fs.listFiles(path, True)
    statuses = []
    while listing.hasNext():
        statuses.append(listing.next())
    for status in sorted(statuses, key=lambda s: s.getPath().toString()):
        full = status.getPath().toString()
        relative = full[len(base):] if full.startswith(base) else full
        if any(part.startswith((".", "_")) for part in relative.split("/")):
            continue  # a writer's temporary file, or Spark's _SUCCESS: not data, by Hadoop's convention
        if not _in_range(relative, since, until):
            continue
        problem, count = _check(jvm, conf, status, expected)
        if problem:
            skipped.append(Skipped(relative, problem))
        else:
            files.append(DataFile(full, relative, count))
            rows += count
    return Input(name, root, tuple(files), rows, tuple(skipped))


def read(spark: SparkSession, source: Input, schema: pa.Schema) -> DataFrame:
    """The checked files of `source` as one DataFrame (empty, with the schema, when there are none)."""
    struct = spark_schema(schema)
    if not source.files:
        return spark.createDataFrame([], struct)
    return spark.read.schema(struct).parquet(*(f.path for f in source.files))


def verify(spark: SparkSession, source: Input, df: DataFrame) -> Input:
    """`source` after one pass that counts the rows Spark actually read from each file: a file whose footer
    is sound but whose pages are damaged is skipped by Spark (spark.sql.files.ignoreCorruptFiles) wholly or
    in part; this is where it gets reported."""
    from pyspark.sql import functions as F

    if not source.files:
        return source
    qualify = spark._jvm.org.apache.hadoop.fs.Path  # noqa: SLF001 - normalise URIs the way the listing did
    # Aggregating a hash of every column makes Spark decode every page; a bare count would come from the
    # footers (and Spark would simplify a count of any non-null expression into one).
    counted = (df.select(F.input_file_name().alias("file"), F.xxhash64(*df.columns).alias("h"))
               .groupBy("file").agg(F.count("*").alias("rows"), F.max("h").alias("_")))
    read = {qualify(r["file"]).toString(): r["rows"] for r in counted.collect()}
    intact = tuple(f for f in source.files if read.get(f.path, 0) == f.rows)
    damaged = [Skipped(f.relative, f"damaged data pages: read {read.get(f.path, 0):,} of its {f.rows:,} rows")
               for f in source.files if f not in intact]
    return Input(source.name, source.root, intact, sum(read.values()),
                 tuple(sorted((*source.skipped, *damaged), key=lambda s: s.file)))


def _in_range(relative: str, since: date | None, until: date | None) -> bool:
    m = _DATE_DIR.search(relative)
    if not m:
        return True
    day = date.fromisoformat(m.group(1))
    return ((since is None or day >= since - timedelta(days=1))
            and (until is None or day <= until + timedelta(days=1)))


def _check(jvm, conf, status, expected: dict[str, str]) -> tuple[str | None, int]:
    """(why the file cannot be read, or None; its row count)."""
    from py4j.protocol import Py4JJavaError

    if not status.getPath().getName().endswith(".parquet"):
        return "not a .parquet file", 0
    if status.getLen() == 0:
        return "empty file (0 bytes)", 0
    try:
        reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
            jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromStatus(status, conf))
        try:
            count, layout = reader.getRecordCount(), reader.getFooter().getFileMetaData().getSchema().toString()
        finally:
            reader.close()
    except Py4JJavaError as e:
        message = str(e.java_exception.getMessage() or "")
        if "is not a Parquet file" in message or "magic number" in message:
            return f"not a complete Parquet file ({status.getLen()} bytes, no valid footer: half-written or " \
                   f"cut short)", 0
        return f"unreadable Parquet footer: {message.splitlines()[0] if message else 'unknown error'}", 0
    found = {name.lower(): physical.lower() for physical, name in
             ((m.group(1), m.group(2)) for m in _COLUMN.finditer(layout))}
    missing = [n for n in expected if n not in found]
    if missing:
        return f"not this dataset's schema: no column {', '.join(missing)}", 0
    wrong = [f"{n} is {found[n]}, expected {t}" for n, t in expected.items() if found[n] != t]
    if wrong:
        return f"not this dataset's schema: {'; '.join(wrong)}", 0
    return None, count
