"""`ackscope pipeline` end to end on handcrafted inputs: damaged files skipped and named, reruns that give the
same output, date partitions replaced only where a rerun covers them, and a quiet, one-line-per-error CLI."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
from pipeline_builders import Log, at, read_reports, write_events, write_snapshots

from ackscope.apps.cli import main
from ackscope.model.schemas import ADDED_COLUMNS, REPORTS
from ackscope.model.schemas import SNAPSHOTS as SCHEMAS
from ackscope.pipeline.inputs import check_footer, physical_types
from ackscope.pipeline.run import PipelineConfig, Progress, execute

ACKSCOPE = str(Path(sys.executable).with_name("ackscope"))


def _log(runs: int = 1, start: float = 0.0) -> list[Log]:
    logs = []
    for r in range(runs):
        log = Log(run_id=f"run{r}")
        for seq in range(1, 41):
            log.happy(seq, start + seq)
        log.add(41, "published", start + 41).add(41, "confirmed", start + 41.01, 0.01, batch_size=1)  # lost
        log.happy(42, start + 400)
        logs.append(log)
    return logs


def _run(data: Path, out: Path, **kw) -> dict:
    return execute(PipelineConfig(str(data), str(out), **kw), Progress(io.StringIO()))


def test_damaged_files_are_skipped_counted_and_named_and_the_rest_is_read(spark, tmp_path):
    data = tmp_path / "data"
    good = write_events(data, *_log())
    day = good.parent
    raw = good.read_bytes()
    (day / "part-half-written.parquet").write_bytes(raw[: len(raw) // 2])
    (day / "part-garbage.parquet").write_bytes(b"PAR1 this is not parquet at all PAR1")
    (day / "part-empty.parquet").write_bytes(b"")
    pq.write_table(SCHEMAS["queues"].empty_table(), day / "part-foreign.parquet")
    (day / "notes.txt").write_text("left here by someone")
    (day / ".part-in-progress.parquet.tmp").write_bytes(raw[:100])  # a writer's temporary file: not data
    # A sound footer over damaged pages: only reading the data shows it.
    damaged = day / "part-damaged-pages.parquet"
    pq.write_table(pq.read_table(good), damaged, compression="none")
    pages = bytearray(damaged.read_bytes())
    pages[8:1500] = bytes((i * 37) % 251 for i in range(8, 1500))
    damaged.write_bytes(bytes(pages))

    summary = _run(data, tmp_path / "out")

    events = summary["inputs"]["events"]
    reasons = {s["file"].split("/")[-1]: s["reason"] for s in events["skipped"]}
    assert set(reasons) == {"part-half-written.parquet", "part-garbage.parquet", "part-empty.parquet",
                            "part-foreign.parquet", "notes.txt", "part-damaged-pages.parquet"}
    assert reasons["part-damaged-pages.parquet"] == "damaged data pages (the footer is sound)"
    assert "half-written or cut short" in reasons["part-half-written.parquet"]
    assert reasons["part-empty.parquet"] == "empty file (0 bytes)"
    assert "no column run_id" in reasons["part-foreign.parquet"]
    assert events["files_skipped"] == summary["files_skipped"] == 6
    assert events["files_read"] == 1 and events["rows"] == pq.read_metadata(good).num_rows
    assert summary["probes"]["classic-persistent"]["lost"] == 1
    assert summary["probes"]["classic-persistent"]["delivered"] == 41


def test_a_rerun_over_the_same_input_writes_the_same_reports(spark, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    write_events(data, *_log(runs=2))
    first = _run(data, out)
    before = read_reports(out)
    files = sorted(p.relative_to(out) for p in out.rglob("*.parquet"))
    second = _run(data, out)
    assert read_reports(out) == before
    assert len(sorted(out.rglob("*.parquet"))) == len(files)  # replaced, not appended
    assert {k: v for k, v in first.items() if k != "run_time_s"} == \
        {k: v for k, v in second.items() if k != "run_time_s"}


def test_a_rerun_for_one_day_replaces_only_that_days_partitions(spark, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    write_events(data, *_log(), name="day1.parquet")
    write_events(data, *_log(start=86_400.0), name="day2.parquet")
    _run(data, out)
    day1 = [r for r in read_reports(out)["confirm_latency"] if r["window_start"].day == at(0).day]
    assert len({p.name for p in (out / "confirm_latency").iterdir() if p.name.startswith("date=")}) == 2

    _run(data, out, since=at(86_400), window_s=3600)
    latency = read_reports(out)["confirm_latency"]
    assert [r for r in latency if r["window_start"].day == at(0).day] == day1  # untouched
    day2 = [r for r in latency if r["window_start"].day == at(86_400).day]
    assert len(day2) == 1 and day2[0]["count"] == 42  # one hourly window now


def _older(kind: str):
    """The schema `kind` had before its added columns (what an exporter of an earlier release wrote)."""
    schema = SCHEMAS[kind]
    return schema.remove(schema.get_field_index("identity")).remove(schema.get_field_index("client"))


def _channel(t: float, channel: str, unacked: int, **kw) -> dict:
    return {"taken_at": t, "vhost": "/", "channel": channel, "connection_name": "", "user": "app",
            "prefetch_limit": 10, "messages_unacked": unacked, "consumer_count": 1, "confirm": False,
            "transactional": False, "published_total": int(t), **kw}


def test_a_history_file_written_before_a_column_was_added_passes_its_footer_check(tmp_path):
    old = write_snapshots(tmp_path, "channels", [_channel(0, "a (1)", 3)], schema=_older("channels"))
    size = old.stat().st_size
    expected = physical_types(SCHEMAS["channels"])
    assert check_footer((f"file:{old}", size, expected, ADDED_COLUMNS["channels"], "taken_at"))[:2] == (None, 1)
    # Without the rule it would be another dataset's file, as any file lacking a column the dataset requires is.
    why, _, _ = check_footer((f"file:{old}", size, expected, frozenset(), "taken_at"))
    assert why == "not this dataset's schema: no column client, identity"


def test_old_and_new_history_files_read_as_one_dataset_and_the_reports_name_the_client(spark, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    # An exporter of an earlier release wrote the first minute, without client columns; this one the next.
    write_snapshots(data, "channels", [_channel(t, "10.0.0.7:5000 -> 10.0.0.1:5672 (1)", 10) for t in (0, 30)]
                    + [_channel(t, "10.0.0.8:6000 -> 10.0.0.1:5672 (1)", 2) for t in (0, 30)],
                    name="part-old.parquet", schema=_older("channels"))
    worker = dict(client="py-amqp 5.4.2", identity="py-amqp 5.4.2 from 10.0.0.7:5000 as app")
    write_snapshots(data, "channels", [_channel(t, "10.0.0.7:5000 -> 10.0.0.1:5672 (1)", 10, **worker)
                                       for t in (60, 90)], name="part-new.parquet")
    summary = _run(data, out)
    assert summary["inputs"]["snapshots/channels"]["files_read"] == 2
    assert summary["inputs"]["snapshots/channels"]["rows"] == 6 and summary["files_skipped"] == 0
    saturation = {r["channel"]: r for r in read_reports(out)["prefetch_saturation"]}
    named = saturation["10.0.0.7:5000 -> 10.0.0.1:5672 (1)"]
    assert named["samples"] == 4 and named["saturated_samples"] == 4  # old rows and new, one channel
    assert (named["client"], named["identity"]) == (worker["client"], worker["identity"])
    unnamed = saturation["10.0.0.8:6000 -> 10.0.0.1:5672 (1)"]
    assert unnamed["samples"] == 2 and unnamed["client"] is None and unnamed["identity"] is None
    safety = [r for r in read_reports(out)["publisher_safety"] if r["identity"]]
    assert safety and all(r["client"] == worker["client"] and r["mode"] == "none" for r in safety)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([ACKSCOPE, "pipeline", *args], capture_output=True, text=True, timeout=300,
                          env=env or {**os.environ, "ACKSCOPE_LOG_LEVEL": "info"})


def test_the_command_is_quiet_reports_by_stage_and_writes_summary_json(java, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    write_events(data, *_log())
    (data / "events" / "broken.parquet").write_bytes(b"PAR1")
    result = _cli("--data-dir", str(data), "--out", str(out))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "read events: 1 files, 166 rows, 1 skipped"
    assert lines[1].startswith("  skipped broken.parquet: not a complete Parquet file")
    staged = [line.split()[0] for line in lines if line.startswith("  ") and line.rstrip().endswith(" s")]
    assert staged == list(REPORTS)
    assert lines[-1].startswith("done in ") and lines[-1].endswith(f"{out}/summary.json")
    assert not [line for line in lines if "WARN" in line or "INFO" in line or "Traceback" in line]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["files_skipped"] == 1 and summary["outputs"]["delivery_audit"] == 1


# The command's errors run in this process, on the suite's Spark (what the command prints is captured at the file
# descriptor, the JVM's too); only what must start a Spark of its own runs as a process.
def test_an_empty_data_dir_is_one_clear_line(spark, tmp_path, capfd):
    (tmp_path / "data").mkdir()
    code = main(["pipeline", "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out")])
    assert code == 1
    assert capfd.readouterr().err.strip().splitlines() == [
        f"ackscope pipeline: nothing to read under {tmp_path / 'data'}: expected probe events in "
        f"{tmp_path / 'data'}/events/, exporter history in {tmp_path / 'data'}/snapshots/ or traced messages in "
        f"{tmp_path / 'data'}/traces/messages/ (run the probes or the exporter with --data-dir)"]


def test_an_unwritable_output_is_one_line_from_spark(spark, tmp_path, capfd):
    data = tmp_path / "data"
    write_events(data, *_log())
    (tmp_path / "out").write_text("a file where the output directory should be")
    code = main(["pipeline", "--data-dir", str(data), "--out", str(tmp_path / "out")])
    err = capfd.readouterr().err
    assert code == 1
    error = [line for line in err.splitlines() if line.startswith("ackscope pipeline:")]
    assert len(error) == 1 and error[0].startswith("ackscope pipeline: Spark failed: ")
    assert "Traceback" not in err


def test_without_java_the_command_says_what_to_install(tmp_path):
    data = tmp_path / "data"
    write_events(data, *_log())
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}
    result = _cli("--data-dir", str(data), "--out", str(tmp_path / "out"), env=env)
    assert result.returncode == 1
    assert result.stderr.strip() == ("ackscope pipeline: the pipeline needs a Java runtime (17 or newer) and none "
                                     "was found: install openjdk-17-jre-headless or set JAVA_HOME")


def test_bad_options_are_usage_errors_before_spark_starts(capsys):
    assert main(["pipeline", "--data-dir", "d", "--out", "o", "--window", "fortnight"]) == 2
    # A --since after --until, whatever the day the suite runs: tomorrow against a day ago.
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert main(["pipeline", "--data-dir", "d", "--out", "o", "--since", tomorrow, "--until", "1d"]) == 2
    assert main(["pipeline", "--data-dir", "d"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["ackscope pipeline: --window: must be a duration such as 500ms, 5s, 1m, 6h or 2d, not 'fortnight'",
                   "ackscope pipeline: --since must be before --until",
                   "ackscope pipeline: --out is required"]


def test_a_spark_error_is_said_by_its_first_line_and_a_java_one_by_the_jvms_own_message():
    from py4j.protocol import Py4JJavaError

    from ackscope.pipeline.session import first_line

    class JavaException:  # what py4j holds of an exception the JVM raised
        _target_id = "o1"

        def getMessage(self):  # noqa: N802 - Java's name
            return "Path does not exist: file:/data/events.\n\tat org.apache.spark.sql..."

    raised = Py4JJavaError("An error occurred while calling o42.parquet.\n", JavaException())
    assert first_line(raised) == "Path does not exist: file:/data/events."
    assert first_line(RuntimeError("\n\n  Spark did not start\n\ncaused by ...")) == "Spark did not start"
    assert first_line(KeyError()) == "KeyError"
