"""Time windows and ranges shared by the pipeline's transformations."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def window_start(ts: str, seconds: int) -> Column:
    """The start of the fixed, epoch-aligned window of `seconds` that `ts` falls in."""
    width = seconds * 1_000_000
    return F.timestamp_micros(F.floor(F.unix_micros(ts) / width) * width)


def within(df: DataFrame, ts: str, since: datetime | None, until: datetime | None) -> DataFrame:
    """Rows whose `ts` is in [since, until)."""
    if since is not None:
        df = df.where(F.col(ts) >= F.lit(since))
    if until is not None:
        df = df.where(F.col(ts) < F.lit(until))
    return df
