"""`ackscope pipeline --incremental`: each run reads only the files no earlier run read, and its reports equal a
full run's over all the files, whatever a message's story or a window spans; a run with nothing new reads and
writes nothing; a run killed mid-way neither loses nor double-counts; a damaged state, or one made from other
input or options, is refused in one line, and --rebuild starts over."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pipeline_builders import Log, read_reports, traced, write_events, write_snapshots, write_traces

from ackscope.apps.cli import main
from ackscope.pipeline.incremental import StateRefused
from ackscope.pipeline.run import PipelineConfig, Progress, execute

ACKSCOPE = str(Path(sys.executable).with_name("ackscope"))


def _channel(t: float, unacked: int, published: int) -> dict:
    return {"taken_at": t, "vhost": "/", "channel": "10.0.0.7:5000 -> 10.0.0.1:5672 (1)", "connection_name": "",
            "user": "app", "prefetch_limit": 10, "messages_unacked": unacked, "consumer_count": 1, "confirm": False,
            "transactional": False, "published_total": published, "client": "pika 1.3.2", "identity": "app"}


def _batch(data: Path, n: int, events: bool = True) -> None:
    """Part n (1–3) of one history, each part in files of its own, written as the probes and exporter would (the
    exporter's alone without `events`)."""
    run1 = Log(run_id="run1", consumer="ctag1")
    if n == 1:
        for seq in range(1, 41):
            run1.happy(seq, seq)
        run1.add(41, "published", 50).add(41, "confirmed", 50.01, 0.01, batch_size=1)  # never delivered
        run1.add(42, "published", 90)  # its confirm and delivery are in the next part
        for seq in (43, 44, 45):  # one frame confirms three
            run1.add(seq, "published", 94).add(seq, "confirmed", 95, 1.0, batch_size=3)
    elif n == 2:
        run1.add(42, "confirmed", 100.5, 10.5, batch_size=1).add(42, "delivered", 100.2, 10.2, redelivered=False)
        for seq in (43, 44, 45):
            run1.add(seq, "delivered", 110, 16.0, redelivered=False).add(seq, "acked", 110.1)
        for seq in range(46, 81):  # the window [60 s, 120 s) holds events of both parts
            run1.happy(seq, 100 + seq - 46)
        run1.add(7, "requeued", 150).add(7, "delivered", 150.5, 143.5, redelivered=True)  # a redelivery
        run1.add(8, "delivered", 151, 144.0, redelivered=True)  # a duplicate
    else:
        run1.happy(81, 400)  # the run's log now runs past seq 41's deadline: lost
        for seq in (82, 83):
            run1.add(seq, "published", 409).add(seq, "confirmed", 410, 1.0, batch_size=2)
            run1.add(seq, "delivered", 409.5, 0.5, redelivered=False)
        run2 = Log(run_id="run2", probe="quorum", queue_type="quorum")
        for seq in range(1, 21):
            run2.happy(seq, 420 + seq)
        if events:
            write_events(data, run2, name=f"part-{n}-run2.parquet")
    if events:
        write_events(data, run1, name=f"part-{n}.parquet")
    # Snapshots every 30 s: a channel at its prefetch limit in two samples of three, publishing; a queue whose
    # counters restart in the last part (the node restarted); the channel's consumers, on another queue later.
    times = range(n * 100 - 100, n * 100, 30)
    write_snapshots(data, "channels", [_channel(t, 10 if t % 60 else 3, int(t)) for t in times],
                    name=f"part-{n}.parquet")
    since = [t - 280 if t >= 280 else t for t in times]  # seconds since the counters (re)started
    write_snapshots(data, "queues", [{"taken_at": t, "vhost": "/", "queue": "jobs", "type": "quorum", "durable": True,
                                      "delivered_total": 3 * u, "redelivered_total": u // 2}
                                     for t, u in zip(times, since)], name=f"part-{n}.parquet")
    write_snapshots(data, "consumers", [{"taken_at": t, "vhost": "/", "queue": "a" if n == 1 else "b",
                                         "consumer_tag": "ctag", "channel": "10.0.0.7:5000 -> 10.0.0.1:5672 (1)",
                                         "connection_name": "", "prefetch_count": 10, "ack_required": n != 3}
                                        for t in times], name=f"part-{n}.parquet")


def _run(data: Path, out: Path, **kw) -> dict:
    return execute(PipelineConfig(str(data), str(out), **kw), Progress(io.StringIO()))


def _incremental(data: Path, out: Path, **kw) -> tuple[dict, list[str]]:
    said = io.StringIO()
    summary = execute(PipelineConfig(str(data), str(out), incremental=True, **kw), Progress(said))
    return summary, said.getvalue().splitlines()


def test_each_incremental_run_reads_only_new_files_merges_only_the_buckets_they_reach_and_writes_what_a_full_run_writes(
        spark, tmp_path):
    data = tmp_path / "data"
    for n in (1, 2, 3):
        _batch(data, n)
        summary, said = _incremental(data, tmp_path / "incremental")
        new_files = 2 if n == 3 else 1
        assert said[0].startswith(f"read events: {new_files} {'new ' if n > 1 else ''}files"), said
        assert summary["inputs"]["events"]["files_read"] == new_files and summary["incremental"]["run"] == n
        full = tmp_path / f"full-{n}"
        _run(data, full)
        assert read_reports(tmp_path / "incremental") == read_reports(full), f"after part {n}"
    audit = {r["run_id"]: r for r in read_reports(full)["delivery_audit"]}
    # What the parts were built to hold: a story across files, a loss decided two runs later, a duplicate.
    assert (audit["run1"]["lost"], audit["run1"]["awaiting"], audit["run1"]["duplicates"]) == (1, 0, 1)
    assert audit["run1"]["delivered"] == 83 - 1 and audit["run2"]["published"] == 20
    # Order, judged against the consumer's mark of the parts before: 42 to 45 came after later messages (46 and
    # on, in part 2), first deliveries; 7 and 8 were redelivered after 80.
    assert (audit["run1"]["out_of_order_first"], audit["run1"]["out_of_order_redelivered"]) == (4, 2)
    assert [r["seq"] for r in read_reports(full)["out_of_order_messages"]] == [42, 43, 44, 45]
    saturation, = read_reports(full)["prefetch_saturation"]
    assert saturation["queues"] == ["a", "b"] and saturation["auto_ack"] and saturation["samples"] == 12
    hotspot, = read_reports(full)["redelivery_hotspots"]
    # 0 → 260 s counted across the parts' files, then the restart: 10 s more.
    assert (hotspot["delivered"], hotspot["redelivered"]) == (3 * 260 + 3 * 10, 260 // 2 + 10 // 2)
    # Only the committed run's state is kept, and the messages of the buckets part 3 reached (both runs').
    state_dir = tmp_path / "incremental" / "_state"
    state = sorted(p.name for p in state_dir.iterdir() if not p.name.startswith("."))
    assert state == ["gen-000003", "manifest-000003.json", "messages-000003"], state
    # Part 4 reaches run1's first bucket (seq 84) and a second of run2 (seq 2^20 + 1): run2's first bucket, which
    # nothing new reaches, is neither read nor written again.
    run1, run2 = Log(run_id="run1", consumer="ctag1"), Log(run_id="run2", probe="quorum", queue_type="quorum")
    run1.happy(84, 500)
    for seq in (85, 86):  # a confirm frame of a time before part 3's (410 s): every frame's gap is computed again
        run1.add(seq, "published", 299).add(seq, "confirmed", 300, 1.0, batch_size=2)
        run1.add(seq, "delivered", 502, 203.0, redelivered=False)
    run2.happy(2**20 + 1, 501)
    write_events(data, run1, name="part-4.parquet")
    write_events(data, run2, name="part-4-run2.parquet")
    kept = {p: p.stat().st_mtime_ns for p in (state_dir / "messages-000003").rglob("*.parquet")}
    _, said = _incremental(data, tmp_path / "incremental")
    assert any(line.split() == ["2", "of", "3", "buckets", "merged"] for line in said), said
    # Probe events alone: the snapshot history's parts and reports, and the trace reports, are carried, not computed
    # again.
    assert [line.split()[1] for line in said if "carried from run 3: nothing new in its input" in line] == [
        "saturation", "consumer_queues", "hotspots", "safety", "channels_last", "queues_last"], said
    assert [line.split()[0] for line in said if "as the run before wrote them" in line] == [
        "prefetch_saturation", "redelivery_hotspots", "publisher_safety", "trace_audit", "trace_queue_time"], said
    buckets = json.loads((state_dir / "manifest-000004.json").read_text())["buckets"]
    assert sorted(buckets.values()) == [3, 4, 4], buckets
    left = {p: p.stat().st_mtime_ns for p in (state_dir / "messages-000003").rglob("*.parquet")}
    assert len(left) == 1 and all(kept[p] == t for p, t in left.items()), (kept, left)  # run2's first, untouched
    assert sorted(p.name for p in state_dir.iterdir() if not p.name.startswith(".")) == [
        "gen-000004", "manifest-000004.json", "messages-000003", "messages-000004"]
    _run(data, tmp_path / "full-4")
    assert read_reports(tmp_path / "incremental") == read_reports(tmp_path / "full-4")
    assert {r["run_id"]: r["published"] for r in read_reports(tmp_path / "full-4")["delivery_audit"]} == {
        "run1": 86, "run2": 21}
    assert {r["probe"]: r["multi_message_frames"] for r in read_reports(tmp_path / "full-4")["confirm_batch_interval"]
            } == {"classic-persistent": 3}


def test_a_run_with_nothing_new_reads_and_writes_nothing_and_one_of_one_input_leaves_the_others_reports_alone(
        spark, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    _batch(data, 1)
    _incremental(data, out)
    written = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    summary, said = _incremental(data, out)
    assert said[0] == "read events: 0 new files, 0 rows" and said[-1] == "nothing new since run 1: the reports stand"
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == written
    assert summary["incremental"]["run"] == 1
    # The exporter's history alone: the probes' parts and reports stand as run 1 left them, and the run's
    # reports are still a full run's.
    _batch(data, 2, events=False)
    summary, said = _incremental(data, out)
    assert said[0] == "read events: 0 new files, 0 rows", said
    assert not [line for line in said if line.startswith("  state ") and "carried" not in line
                and line.split()[1] not in ("messages", "saturation", "consumer_queues", "hotspots", "safety",
                                            "channels_last", "queues_last")], said
    probe_reports = ("delivery_audit", "lost_messages", "out_of_order_messages", "confirm_latency",
                     "confirm_batches", "confirm_batch_interval", "delivery_latency", "redelivery")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.parts[len(out.parts)]
            in probe_reports} == {p: t for p, t in written.items() if p.parts[len(out.parts)] in probe_reports}
    _run(data, tmp_path / "full")
    assert read_reports(out) == read_reports(tmp_path / "full")
    assert summary["outputs"] == json.loads((tmp_path / "full" / "summary.json").read_text())["outputs"]
    # Traced messages alone, in two files a run apart: the trace reports are made from both, as a full run's.
    write_traces(data, [traced(n, n + 0.5) for n in range(10)], name="part-a.parquet")
    _incremental(data, out)
    write_traces(data, [traced(100 + n, None) for n in range(3)], name="part-b.parquet")
    summary, said = _incremental(data, out)
    assert "read traces/messages: 1 new files, 3 rows" in said, said
    [row] = read_reports(out)["trace_audit"]
    assert (row["published"], row["unprocessed"]) == (13, 3)
    _run(data, tmp_path / "full-traced")
    assert read_reports(out) == read_reports(tmp_path / "full-traced")


def _cli(data: Path, out: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([ACKSCOPE, "pipeline", "--data-dir", str(data), "--out", str(out), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _killed_at(data: Path, out: Path, stage: str) -> None:
    """`ackscope pipeline --incremental` in a process of its own, killed (SIGKILL) as it begins `stage`."""
    doomed = _cli(data, out, "--incremental")
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(doomed.stderr), daemon=True).start()
    deadline = time.monotonic() + 480  # CI's parallel phase once took more than 240 s to reach the reports
    while not any(line.startswith(stage) for line in lines):
        assert doomed.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.02)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(30)


def test_a_run_killed_mid_way_neither_loses_nor_double_counts(spark, java, tmp_path):
    """Killed once its state is half written, then (the same run again) once half the reports are: the next run
    starts again from the last committed run, and its reports are those of a full run. Only the runs that are
    killed are processes of their own; the others run in this one, on the suite's Spark."""
    data, out = tmp_path / "data", tmp_path / "out"
    _batch(data, 1)
    _incremental(data, out)
    _batch(data, 2)
    for stage in ("  state frames", "  confirm_latency"):
        _killed_at(data, out, stage)
        assert (out / "_state" / "gen-000002").exists()  # what the killed run left
    _batch(data, 3)
    _, said = _incremental(data, out)
    assert said[0].startswith("read events: 3 new files"), said  # part 2's file, and part 3's two
    _run(data, tmp_path / "full")
    assert read_reports(out) == read_reports(tmp_path / "full")
    assert sorted(p.name for p in (out / "_state").iterdir() if not p.name.startswith(".")) == [
        "gen-000002", "manifest-000002.json", "messages-000002"]


def test_a_damaged_state_or_one_of_other_input_is_refused_in_one_line_and_rebuild_starts_over(spark, tmp_path,
                                                                                                 capfd):
    data, out = tmp_path / "data", tmp_path / "out"
    _batch(data, 1)
    _incremental(data, out)
    manifest = out / "_state" / "manifest-000001.json"

    def refused(data_dir: Path = data, **kw) -> str:
        with pytest.raises(StateRefused) as refusal:
            _incremental(data_dir, out, **kw)
        return str(refusal.value)

    # Other options, other input, a file that changed under it.
    assert refused(window_s=300) == (
        f"the incremental state under {out}/_state was built with --window 60s --loss-deadline 120, not --window "
        "300s --loss-deadline 120: run with those, or with --rebuild to start over")
    other = tmp_path / "other"
    _batch(other, 1)
    assert refused(other).startswith(f"the incremental state under {out}/_state was built from file:{data}, not "
                                     f"file:{other}: give each input its own --out")
    events_file = next((data / "events").rglob("part-1.parquet"))
    original = events_file.read_bytes()
    events_file.write_bytes(original + b"\0")
    assert refused() == (f"file:{data}/events/{events_file.relative_to(data / 'events')} is not the file an earlier "
                         f"run read (its size changed): the state under {out}/_state no longer describes the input: "
                         "run with --rebuild to start over")
    events_file.write_bytes(original)
    # Damage: a manifest that is not JSON (Hadoop's checksum finds it first); a state file cut short.
    good = manifest.read_text()
    manifest.write_text(good[:40])
    assert refused().startswith(f"the incremental state under {out}/_state is damaged "
                                f"({out}/_state/manifest-000001.json: ")
    # A state an earlier ackscope kept in another format (its checksum gone, as a copy without it would be).
    (manifest.parent / f".{manifest.name}.crc").unlink(missing_ok=True)
    manifest.write_text(json.dumps({**json.loads(good), "format": 1}))
    assert refused() == (f"the incremental state under {out}/_state was written in format 1, and this ackscope "
                         "keeps format 3: run with --rebuild to start over")
    manifest.write_text(good)
    part = next((out / "_state" / "messages-000001").rglob("*.parquet"))  # run1's bucket, which part 2 reaches
    part.write_bytes(part.read_bytes()[:100])
    _batch(data, 2)
    # The command says it in one line, after its progress, and exits 1 (run in this process, on the suite's Spark,
    # not in a JVM of its own: what Python prints is the command's; the killed-run test runs it as a process).
    capfd.readouterr()
    code = main(["pipeline", "--data-dir", str(data), "--out", str(out), "--incremental"])
    err = capfd.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("ackscope pipeline:")]
    assert code == 1 and "Traceback" not in err and len(errors) == 1 and err.strip().endswith(errors[0]), err
    assert errors[0].startswith(f"ackscope pipeline: the incremental state under {out}/_state is damaged ("), err
    summary, said = _incremental(data, out, rebuild=True)
    assert said[0].startswith("read events: 2 files") and summary["incremental"]["run"] == 1
    _run(data, tmp_path / "full")
    assert read_reports(out) == read_reports(tmp_path / "full")


def test_incremental_options_that_cannot_go_together_are_usage_errors(capsys):
    assert main(["pipeline", "--data-dir", "d", "--out", "o", "--rebuild"]) == 2
    assert main(["pipeline", "--data-dir", "d", "--out", "o", "--incremental", "--since", "6h"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "ackscope pipeline: --rebuild starts an incremental state over: give --incremental too",
        "ackscope pipeline: --incremental reads the whole history: --since and --until are for full runs"]


def test_the_state_records_each_files_size_rows_and_time_span(spark, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    _batch(data, 1)
    _incremental(data, out)
    files = json.loads((out / "_state" / "manifest-000001.json").read_text())["files"]
    (relative, (size, rows, first, last)), = files["events"].items()
    assert relative.endswith("part-1.parquet") and size == next((data / "events").rglob("part-1.parquet")).stat().st_size
    assert rows == 4 * 40 + 2 + 1 + 6 and last - first == 94_000_000  # the footer's statistics: 1 s to 95 s
