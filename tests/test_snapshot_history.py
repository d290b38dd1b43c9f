"""The exporter's snapshot history under --data-dir: channels, consumers and queues as Parquet, the same
fields the metrics carry, written atomically and readable as one dataset per kind."""

from __future__ import annotations

import pyarrow.dataset as ds
from helpers import only_vhost, wait_for_sample
from snapshot_builders import channel, consumer, queue, snapshot, stats

from ackscope.exporter.history import SnapshotHistory, rows
from ackscope.model.schemas import SNAPSHOTS as SCHEMAS


def test_history_rows_carry_what_the_metrics_carry():
    s = snapshot(2000.5, channels=[channel(prefetch_count=10, messages_unacked=7, message_stats=stats(publish=3))],
                 consumers=[consumer(prefetch_count=10)], queues=[queue(messages_ready=4, messages_persistent=4)])
    r = rows(s)
    expected = {"taken_at": 2_000_500_000, "prefetch_limit": 10, "messages_unacked": 7, "published_total": 3,
                "confirmed_total": None, "connection_name": "app"}
    assert {k: r["channels"][0][k] for k in expected} == expected
    assert r["queues"][0]["messages_ready"] == 4 and r["consumers"][0]["ack_required"] is True
    for kind, schema in SCHEMAS.items():
        assert set(r[kind][0]) == set(schema.names), kind


def test_every_nth_snapshot_is_kept(tmp_path):
    history = SnapshotHistory(tmp_path, every=3)
    for t in range(7):
        history.record(snapshot(1000.0 + t, queues=[queue()]))
    history.logs["queues"].flush()
    taken = sorted(r["taken_at"].timestamp() for r in ds.dataset(tmp_path / "snapshots" / "queues",
                                                                 partitioning="hive").to_table().to_pylist())
    assert taken == [1000.0, 1003.0, 1006.0]


def test_exporter_records_snapshot_history_of_a_live_broker(broker, vhost, clients, start_exporter, tmp_path):

    conn = clients(broker, vhost, "history-client")
    ch = conn.channel()
    ch.queue_declare("orders", durable=True)
    ch.basic_qos(prefetch_count=5)
    ch.basic_consume("orders", on_message_callback=lambda *a: None)
    exporter = start_exporter(broker.management_url, data_dir=str(tmp_path),
                              selection=only_vhost(vhost))
    wait_for_sample(exporter, "ackscope_consumer_prefetch_count", 5, vhost=vhost, queue="orders")
    # The queue's own consumer count comes from its statistics, emitted every few seconds: later than the
    # consumer list (a CI run recorded the consumer while the queue still counted 0).
    wait_for_sample(exporter, "ackscope_queue_consumers", 1, vhost=vhost, queue="orders")
    exporter.stop()  # writes what is buffered
    read = {kind: ds.dataset(tmp_path / "snapshots" / kind, format="parquet", partitioning="hive").to_table()
            for kind in SCHEMAS}
    for kind, table in read.items():
        assert table.schema.remove_metadata().names[:len(SCHEMAS[kind].names)] == SCHEMAS[kind].names
    consumers = [r for r in read["consumers"].to_pylist() if r["queue"] == "orders"]
    assert consumers and consumers[-1]["connection_name"] == "history-client" and consumers[-1]["prefetch_count"] == 5
    queues = [r for r in read["queues"].to_pylist() if r["queue"] == "orders"]
    assert queues[-1]["durable"] is True and queues[-1]["consumers"] == 1
    channels = [r for r in read["channels"].to_pylist() if r["connection_name"] == "history-client"]
    assert channels and channels[-1]["prefetch_count"] == 5
    assert not [p for p in (tmp_path / "snapshots").rglob(".*")]
