"""The pipeline over what ackscope itself wrote against a real broker: the probes' event log and the
exporter's snapshot history while failure scenarios ran."""

from __future__ import annotations

import io

import pyarrow.dataset as ds
import requests
from helpers import only_vhost, polls_seen, scenarios_running, wait_for
from probe_helpers import probe_config, probe_value, quick, running_probes, wait_probe

from ackscope.pipeline.run import PipelineConfig, Progress, execute
from ackscope.workloads.scenarios import PREFIX


def _publish_count_grew(exporter_url: str, client: str):
    """A condition for wait_for: true once the exporter's snapshots have shown `client`'s channel with two
    different publish counts, so its history holds an increment (the management API refreshes these counters
    only every few seconds)."""
    counts: set[int] = set()

    def condition() -> bool:
        snapshot = requests.get(exporter_url + "/api/snapshot", timeout=5).json()["snapshot"]
        counts.update(c["message_stats"]["publish"] for c in snapshot["channels"]
                      if c["connection_name"] == client and c["message_stats"]["publish"])
        return len(counts) >= 2
    return condition


def _report(out, name: str) -> list[dict]:
    return ds.dataset(out / name, format="parquet", partitioning="hive").to_table().to_pylist()


def test_pipeline_audits_the_event_log_the_probes_wrote_against_a_real_broker(spark, broker, vhost, tmp_path):
    targets = (quick("classic-persistent"), quick("quorum", "quorum", requeue_share=0.1),
               quick("classic-transient", persistent=False))
    with running_probes(probe_config(broker, vhost, targets, data_dir=str(tmp_path / "data"))) as probes:
        for t in targets:
            wait_probe(probes, "ackscope_probe_delivered_total", t.name, 250)  # two bursts of 100 and more
        wait_probe(probes, "ackscope_probe_redelivered_total", "quorum", 5)
    counted = {t.name: {name: probe_value(probes, f"ackscope_probe_{name}_total", t.name)
                        for name in ("published", "confirmed", "delivered", "redelivered", "requeued", "lost",
                                     "duplicates", "nacked", "returned", "out_of_order_first",
                                     "out_of_order_redelivered")} for t in targets}

    summary = execute(PipelineConfig(str(tmp_path / "data"), str(tmp_path / "out"), loss_deadline_s=15.0),
                      Progress(io.StringIO()))

    assert summary["files_skipped"] == 0 and summary["inputs"]["events"]["rows"] > 1000
    audit = {r["probe"]: r for r in _report(tmp_path / "out", "delivery_audit")}
    assert set(audit) == {t.name for t in targets}
    for name, metric in counted.items():
        row = audit[name]
        # The event log and the probe's own counters tell the same story, message for message.
        assert (row["published"], row["confirmed"], row["redelivered"]) == \
            (metric["published"], metric["confirmed"], metric["redelivered"]), name
        assert row["lost"] == metric["lost"] == 0 and row["duplicates"] == metric["duplicates"] == 0
        # Order, judged per consumer from the log as the probe judged it live.
        assert row["out_of_order_first"] == metric["out_of_order_first"] == 0, name
        assert row["out_of_order_redelivered"] == metric["out_of_order_redelivered"], name
        assert row["nacked"] == row["returned"] == row["confirm_timeouts"] == row["republished"] == 0
        # What was confirmed and not delivered when the probes stopped is awaiting, not lost.
        assert row["confirmed"] - row["delivered"] <= row["awaiting"] <= 200
    assert audit["quorum"]["out_of_order_redelivered"] > 0  # requeued: back to its place, behind later deliveries
    assert not _report(tmp_path / "out", "lost_messages")

    latency = _report(tmp_path / "out", "confirm_latency")
    for t in targets:
        mine = [r for r in latency if r["probe"] == t.name]
        assert sum(r["count"] for r in mine) == counted[t.name]["confirmed"]
        assert all(0 < r["p50_s"] <= r["p99_s"] <= r["max_s"] for r in mine)
    assert {(r["probe"], r["queue_type"], r["persistent"]) for r in latency} == {
        ("classic-persistent", "classic", True), ("quorum", "quorum", True), ("classic-transient", "classic", False)}

    batches = _report(tmp_path / "out", "confirm_batches")
    interval = {r["probe"]: r for r in _report(tmp_path / "out", "confirm_batch_interval")}
    for t in targets:
        mine = [r for r in batches if r["probe"] == t.name]
        assert sum(r["messages"] for r in mine) == counted[t.name]["confirmed"]
    # Bursts of 100 are confirmed in multi-message frames, each frame's rows sharing one arrival time.
    multi = [r for r in batches if r["batch_size"] > 1]
    assert multi, batches
    for name in {r["probe"] for r in multi}:
        assert interval[name]["multi_message_frames"] == sum(r["frames"] for r in multi if r["probe"] == name)
        assert interval[name]["interval_p50_s"] > 0

    redelivery = [r for r in _report(tmp_path / "out", "redelivery") if r["probe"] == "quorum"]
    assert sum(r["requeued"] for r in redelivery) == counted["quorum"]["requeued"]
    assert summary["probes"]["quorum"]["confirm_p99_s"] > 0


def test_pipeline_finds_the_culprits_in_the_snapshot_history_of_a_broker_running_failure_scenarios(
        spark, broker, vhost, start_exporter, tmp_path):
    data = tmp_path / "data"
    exporter = start_exporter(broker.management_url, interval=0.5, data_dir=str(data),
                              selection=only_vhost(vhost))
    with scenarios_running(broker, vhost, "prefetch-saturated", "requeue-loop", "publisher-without-confirms",
                           "healthy"):
        culprits = {"prefetch-saturated", "requeue-loop", "publisher-without-confirms"}
        wait_for(lambda: culprits <= {f["rule"] for f in requests.get(exporter.url + "/api/findings",
                                                                     timeout=5).json()["findings"]},
                 timeout=60, what=f"findings {sorted(culprits)}")
        polls_seen(exporter.url, 10)  # ten more polls, with every failure in progress, into the history
        wait_for(_publish_count_grew(exporter.url, "ackscope-scenario publisher-without-confirms"), timeout=30,
                 what="the publisher without confirms' count to grow in the exporter's snapshots")
    exporter.stop()

    summary = execute(PipelineConfig(str(data), str(tmp_path / "out"), window_s=3600), Progress(io.StringIO()))

    assert summary["inputs"]["snapshots/channels"]["rows"] > 0 and summary["files_skipped"] == 0
    saturation = {r["connection_name"]: r for r in _report(tmp_path / "out", "prefetch_saturation")}
    saturated = saturation["ackscope-scenario prefetch-saturated"]
    assert saturated["prefetch_limit"] == 10 and saturated["max_unacked"] == 10
    assert saturated["saturated_share"] >= 0.5 and saturated["queues"] == [f"{PREFIX}prefetch-saturated"]
    assert saturation["ackscope-scenario healthy"]["saturated_share"] < 0.5

    hotspots = _report(tmp_path / "out", "redelivery_hotspots")
    top = min(hotspots, key=lambda r: r["rank"])
    assert top["queue"] == f"{PREFIX}requeue-loop" and top["redelivered_share"] > 0.9

    safety = _report(tmp_path / "out", "publisher_safety")
    modes = {r["connection_name"]: r["mode"] for r in safety}
    assert modes["ackscope-scenario publisher-without-confirms"] == "none"
    assert modes["ackscope-scenario healthy"] == "confirm"
    assert sum(r["published"] for r in safety if r["mode"] == "none") > 0
