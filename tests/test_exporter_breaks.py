"""The exporter with --broker-log: the log is read at every poll, the broker's API answering or not; its events are
counted by client and reason in /metrics, listed in /api/breaks, and handed to the rules."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from snapshot_builders import snapshot
from test_log_episodes import Flapping

from ackscope.exporter.poller import Poller
from ackscope.model.findings import Diagnosis
from ackscope.model.source import FetchError, SourceFailed
from ackscope.sources import BreakLedger, BrokerLogWatch

RECORDED = Path(__file__).parent / "data" / "broker-log-4.0.5" / "plain.log"
AFTER_RECORDING = 1_795_683_600.0  # 2026-11-26 09:00 UTC, just after the recording's lines


def _samples(poller: Poller) -> dict[tuple[str, tuple], float]:
    text = poller.exposition.metrics_body(gzipped=False).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _poller(outcomes, log: Path, seen: list) -> Poller:
    ledger = BreakLedger(window_seconds=3600, log=BrokerLogWatch(str(log)))

    def diagnose(snap, previous, breaks):
        seen.append(breaks)
        return Diagnosis()

    return Poller(Flapping(outcomes), interval=1.0, diagnose=diagnose,
                  breaks=lambda snap: ledger.update(snap, AFTER_RECORDING))


def test_the_log_is_counted_by_client_and_reason_even_while_the_api_does_not_answer(tmp_path):
    log = tmp_path / "rabbit.log"
    log.write_text("")
    down = SourceFailed([FetchError("overview", "timeout", "no answer within 5.0s")])
    seen: list = []
    poller = _poller([down, snapshot()], log, seen)
    log.write_text(RECORDED.read_text())
    poller.poll_once()
    samples = _samples(poller)
    assert samples[("ackscope_up", ())] == 0
    who = (("connection_name", "orders-worker"), ("user", "guest"), ("vhost", "/"))
    assert samples[("ackscope_broker_channel_errors_total",
                    tuple(sorted(who + (("reason", "unknown_delivery_tag"),))))] == 2
    assert samples[("ackscope_broker_channel_errors_total",
                    tuple(sorted(who + (("reason", "inequivalent_arguments"),))))] == 1
    stalled = (("connection_name", "stalled-worker"), ("user", "guest"), ("vhost", "/"))
    assert samples[("ackscope_broker_consumer_timeouts_total", stalled)] == 2
    assert samples[("ackscope_broker_log_readable", ())] == 1
    assert samples[("ackscope_broker_log_lines_total", ())] == len(RECORDED.read_text().splitlines())
    assert seen == [], "no snapshot, no diagnosis"
    poller.poll_once()
    assert seen[0] is poller.breaks and len(seen[0].events) > 20
    document = json.loads(gzip.decompress(poller.exposition.breaks.gz()))
    assert document["sources"] == ["broker log"] and document["problems"] == []
    first_error = next(e for e in document["events"] if e["kind"] == "channel_error")
    assert first_error["cause"] == "unknown_delivery_tag" and first_error["connection_name"] == "orders-worker"


def test_a_log_that_cannot_be_read_is_a_gauge_at_zero_and_the_broker_is_still_exported(tmp_path):
    poller = _poller([snapshot()], tmp_path / "not-there.log", [])
    poller.poll_once()
    samples = _samples(poller)
    assert samples[("ackscope_up", ())] == 1 and samples[("ackscope_broker_log_readable", ())] == 0
    assert json.loads(gzip.decompress(poller.exposition.breaks.gz()))["problems"] == [
        f"the broker log {tmp_path / 'not-there.log'} does not exist (yet): it is looked for again at each poll"]


def test_without_a_broker_log_no_break_family_is_exported():
    poller = Poller(Flapping([snapshot()]), interval=1.0)
    poller.poll_once()
    names = {name for name, _ in _samples(poller)}
    assert "ackscope_up" in names
    assert not any(name.startswith(("ackscope_broker_log_", "ackscope_broker_c")) for name in names)


def test_what_the_log_reader_did_not_understand_is_counted_and_its_first_line_shown(tmp_path):
    # The 4.3.6 recording of drops and refusals (all understood), then a crash report no parser reads.
    log = tmp_path / "rabbit.log"
    log.write_text("")
    poller = _poller([snapshot()], log, [])
    drops = Path(__file__).parent / "data" / "broker-log-drops-4.3.6" / "plain.log"
    crash = "2026-11-29 08:03:49.000000+00:00 [error] <0.1200.0>   crasher:"
    log.write_text(drops.read_text() + crash + "\n2026-11-29 08:03:49.000000+00:00 [error] <0.1200.0>     pid: x\n")
    poller.poll_once()
    samples = _samples(poller)
    assert samples[("ackscope_broker_log_not_understood_lines_total", ())] == 1
    assert samples[("ackscope_broker_messages_dropped_total", (("connection_name", ""), ("reason", "dead_letter_cycle"),
                                                               ("user", ""), ("vhost", "")))] == 1
    document = json.loads(gzip.decompress(poller.exposition.breaks.gz()))
    assert document["log"]["not_understood_lines"] == 1 and document["log"]["first_not_understood"] == crash
    assert document["log"]["unknown_lines"] == 0 and document["log"]["first_unknown"] is None
    (dropped,) = [e for e in document["events"] if e["kind"] == "message_dropped"]
    assert dropped["queues"] == ["cycle.work", "cycle.retry", "cycle.work"] and dropped["cause"] == "dead_letter_cycle"
