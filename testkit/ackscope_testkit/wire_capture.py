"""The probes against a packet capture of their own connections: what the wire says of each message, and
how far the probes' event log is from it (issue 14; bench/probe_truth.py and tests/test_probe_wire.py).

tshark captures a node's AMQP port on loopback. Each basic.publish is paired with the basic.ack or
basic.nack that settles it (per TCP stream and channel, delivery tags counted from 1, `multiple` honoured),
and with the first basic.deliver of it (the k-th first delivery of a queue is its k-th publish: one
consumer, and the queue keeps publish order). The k-th publish of a target's channel is the probe's k-th
`published` event.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

BURST_NEIGHBOURS = 25  # publishes of one channel within ±0.5 s above which a publish counts as in a burst
TSHARK_FIELDS = ["-T", "json", "--no-duplicate-keys", "-J", "frame tcp amqp"]


class Capture:
    """tshark on loopback, the node's AMQP port only, into a pcapng file, while the block runs."""

    def __init__(self, path: Path, port: int):
        self.path, self.port = path, port
        self._tshark: subprocess.Popen | None = None

    def __enter__(self) -> Capture:
        # A 64 MiB capture buffer: a burst of hundreds of publishes must not be dropped.
        self._tshark = subprocess.Popen(["tshark", "-q", "-B", "64", "-i", "lo", "-f", f"tcp port {self.port}",
                                         "-w", str(self.path)], stderr=subprocess.PIPE, text=True)
        said = []
        for line in self._tshark.stderr:  # it says when the capture has started: only then is nothing missed
            said.append(line.strip())
            if "Capture started" in line:
                return self
        raise RuntimeError(f"tshark did not start: {' '.join(said)}")

    def __exit__(self, *_exc) -> None:
        self._tshark.send_signal(signal.SIGINT)
        self._tshark.wait(timeout=30)


@dataclass
class WireMessage:
    published: float  # epoch seconds, as the capture stamped the frame
    settled: float | None = None
    batch_size: int | None = None
    delivered: float | None = None


def read_capture(path: Path, port: int) -> dict[str, list[WireMessage]]:
    """{routing key: [its messages, by delivery tag]} from a capture of the probes' connections."""
    # --no-duplicate-keys: a packet carrying many AMQP frames would otherwise repeat the "amqp" key, and a
    # JSON reader keeps only the last one (a burst's publishes went missing that way).
    out = subprocess.run(["tshark", "-r", str(path), "-d", f"tcp.port=={port},amqp", "-Y",
                          "amqp.method.class == 60", *TSHARK_FIELDS], capture_output=True, check=True).stdout
    publishes: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
    settles: dict[tuple[str, str], list[tuple[float, int, bool]]] = defaultdict(list)
    deliveries: dict[str, list[float]] = defaultdict(list)
    for packet in json.loads(out):
        layers = packet["_source"]["layers"]
        t, stream = float(layers["frame"]["frame.time_epoch"]), layers["tcp"]["tcp.stream"]
        to_broker = layers["tcp"]["tcp.dstport"] == str(port)
        for f in layers["amqp"] if isinstance(layers["amqp"], list) else [layers["amqp"]]:
            method, args = f.get("amqp.method.method"), f.get("amqp.method.arguments", {})
            if f.get("amqp.method.class") != "60":
                continue
            if method == "40" and to_broker:  # basic.publish
                publishes[(stream, f["amqp.channel"])].append((t, args.get("amqp.method.arguments.routing_key")))
            elif method in ("80", "120") and not to_broker:  # basic.ack, basic.nack
                settles[(stream, f["amqp.channel"])].append(
                    (t, int(args["amqp.method.arguments.delivery_tag"]), args["amqp.method.arguments.multiple"] == "1"))
            elif method == "60" and not to_broker and args.get("amqp.method.arguments.redelivered") == "0":
                deliveries[args["amqp.method.arguments.routing_key"]].append(t)
    result: dict[str, list[WireMessage]] = {}
    for key, sent in publishes.items():
        messages = [WireMessage(t) for t, _ in sent]
        for t, tag, multiple in settles.get(key, []):
            tags = [x for x in (range(1, tag + 1) if multiple else (tag,)) if messages[x - 1].settled is None]
            for x in tags:
                messages[x - 1].settled, messages[x - 1].batch_size = t, len(tags)
        routing_key = sent[0][1]
        for message, t in zip(messages, deliveries.get(routing_key, [])):
            message.delivered = t
        result[routing_key] = messages
    return result


@dataclass
class Comparison:
    """One target: the wire against the probe's event log, milliseconds."""

    target: str
    wire_confirms: int
    logged_confirms: int
    batches_equal: int
    paired: int
    confirm_diff: dict[str, list[float]] = field(default_factory=lambda: {"steady": [], "burst": []})
    confirm_wire: list[float] = field(default_factory=list)
    confirm_ours: list[float] = field(default_factory=list)
    delivery_diff: list[float] = field(default_factory=list)
    send_diff: dict[str, list[float]] = field(default_factory=lambda: {"steady": [], "burst": []})


def compare(wire: dict[str, list[WireMessage]], events: pd.DataFrame,
            prefix: str = "ackscope.probe.") -> list[Comparison]:
    """Per target, the event log's latencies against the wire's, message by message."""
    out = []
    for key, messages in sorted(wire.items()):
        name = key.removeprefix(prefix)
        mine = events[events.probe == name]
        published_events = mine[mine.kind == "published"].sort_values("seq")
        published = published_events.seq.tolist()
        left_at = published_events.ts.tolist()  # pandas Timestamps, UTC
        confirmed = mine[mine.kind == "confirmed"].set_index("seq")
        first = mine[(mine.kind == "delivered") & ~mine.redelivered.eq(True)]
        delivered = first.drop_duplicates("seq").set_index("seq")
        c = Comparison(name, sum(1 for m in messages if m.settled is not None), len(confirmed), 0, 0)
        times = [m.published for m in messages]
        for i, (seq, m) in enumerate(zip(published, messages)):
            if m.delivered is not None and seq in delivered.index:
                c.delivery_diff.append(delivered.loc[seq, "latency_s"] * 1000 - (m.delivered - m.published) * 1000)
            if m.settled is None or seq not in confirmed.index:
                continue
            c.paired += 1
            theirs, ours = (m.settled - m.published) * 1000, confirmed.loc[seq, "latency_s"] * 1000
            near = sum(1 for x in times[max(0, i - 100):i + 100] if abs(x - m.published) <= 0.5)
            part = "burst" if near > BURST_NEIGHBOURS else "steady"
            c.confirm_diff[part].append(ours - theirs)
            c.send_diff[part].append(m.published * 1000 - left_at[i].timestamp() * 1000)
            c.confirm_wire.append(theirs)
            c.confirm_ours.append(ours)
            c.batches_equal += int(confirmed.loc[seq, "batch_size"] == m.batch_size)
        out.append(c)
    return out


