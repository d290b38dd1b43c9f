"""The dashboard's tables, as pure functions of the exporter's JSON (pandas DataFrames). Pages render them;
tests feed them small documents."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from ackscope.core import evidence
from ackscope.core.durations import describe
from ackscope.core.quantile import histogram_quantile
from ackscope.model.snapshot import prefetch_fill

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def findings(items: list[dict[str, Any]], min_severity: str = "info", now: float | None = None) -> pd.DataFrame:
    """Findings worst first: severity, rule, culprit (the client's name first: it is what on-call knows, then
    the object), since when (UTC) and for how long, vhost, evidence (its rows on one line, "label: value · …",
    core/evidence.py), remedy."""
    rows = [{**row, "evidence": evidence.text(f.get("evidence") or {})}
            for f, row in _worst(items, min_severity, now)]
    return pd.DataFrame(rows, columns=["severity", "rule", "culprit", "since", "for", "vhost", "evidence", "remedy"])


def cards(items: list[dict[str, Any]], min_severity: str = "warning", top: int = 5,
          now: float | None = None) -> list[dict[str, Any]]:
    """The worst `top` findings as findings() has them, each with its evidence as (label, value) rows to show as
    a small table (core/evidence.py), for the landing page's cards."""
    return [{**row, "evidence": evidence.rows(f.get("evidence") or {})}
            for f, row in _worst(items, min_severity, now)[:top]]


def _worst(items: list[dict[str, Any]], min_severity: str, now: float | None) -> list[tuple[dict, dict]]:
    """(finding, its row but the evidence) worst first, at `min_severity` and above."""
    now = time.time() if now is None else now
    keep = [f for f in items if SEVERITY_ORDER.get(f["severity"], 3) <= SEVERITY_ORDER[min_severity]]
    keep.sort(key=lambda f: SEVERITY_ORDER[f["severity"]])  # stable: the exporter's order among equals
    return [(f, {"severity": f["severity"], "rule": f["rule"], "culprit": _culprit(f),
                 "since": None if f.get("since") is None else
                 datetime.fromtimestamp(f["since"], UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                 "for": None if f.get("since") is None else describe(now - f["since"]),
                 "vhost": f["vhost"], "remedy": f.get("remedy", "")}) for f in keep]


def _culprit(f: dict[str, Any]) -> str:
    who = f.get("identity") or f.get("connection_name")
    return f"{who} · {f['object']}" if who else f["object"]


# A broker's state on the landing page of several, worst first: one that cannot be read now is worse than a
# warning (nothing is known of it now), better than a critical (something is known to be wrong).
BROKER_STATES = ("critical", "unreadable", "warning", "ok")


def brokers(fetched: list[tuple[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(a row per broker, worst first: its state, counts, worst finding and what went wrong reading it;
    every broker's findings at warning and above, worst first, each with its broker) from (name, Live) pairs. A
    broker that cannot be read now keeps the findings last read from it, its state saying it is unreadable."""
    rows, found = [], {}
    for name, live in fetched:
        own = findings(live.findings, "warning").assign(broker=name)
        counts = own["severity"].value_counts()
        state = ("unreadable" if live.stale or live.fetched_at is None else "critical" if counts.get("critical")
                 else "warning" if counts.get("warning") else "ok")
        rows.append({"broker": name, "state": state, "critical": int(counts.get("critical", 0)),
                     "warning": int(counts.get("warning", 0)),
                     "worst": f"{own.iloc[0]['rule']}: {own.iloc[0]['culprit']}" if len(own) else "",
                     "problem": live.error or live.exporter_error or ""})
        found[name] = own
    table = pd.DataFrame(rows, columns=["broker", "state", "critical", "warning", "worst", "problem"])
    order = {s: i for i, s in enumerate(BROKER_STATES)}
    table = table.sort_values(["state", "critical", "warning"], key=lambda s: s.map(order) if s.name == "state"
                              else -s, kind="stable").reset_index(drop=True)
    # Among findings as bad, the worse broker's first.
    every = pd.concat([found[name] for name in table["broker"]], ignore_index=True) if found else findings([])
    every = every[["broker", *[c for c in every.columns if c != "broker"]]] if "broker" in every else every
    return table, every.sort_values("severity", key=lambda s: s.map(SEVERITY_ORDER), kind="stable"
                                    ).reset_index(drop=True)


def upgrade(items: list[dict[str, Any]]) -> pd.DataFrame:
    """What one release will change, worst first: severity, the change, the culprit (client first, then the
    object), vhost, what will happen, what to do, and the evidence (on one line, as findings() has it)."""
    rows = [{"severity": f["severity"], "change": f["rule"], "culprit": _culprit(f),
             "vhost": f["vhost"], "what happens": f.get("explanation", ""), "remedy": f.get("remedy", ""),
             "evidence": evidence.text(f.get("evidence") or {})}
            for f in items]
    df = pd.DataFrame(rows, columns=["severity", "change", "culprit", "vhost", "what happens", "remedy", "evidence"])
    return df.sort_values("severity", key=lambda s: s.map(SEVERITY_ORDER), kind="stable").reset_index(drop=True)


SOURCES = {"management": "read from the management API",
           "prometheus": "read from the broker's Prometheus plugin (management statistics off): channels are "
                         "named by process id",
           "management+prometheus": "a large broker: queues read from its Prometheus plugin, the rest from the "
                                    "management API"}


def source_said(source: str | None) -> str:
    """Where the exporter reads the broker, for the page's caption."""
    return SOURCES.get(source or "", "source not known yet")


def prefetch(snapshot: dict[str, Any] | None, search: str = "", top: int = 50) -> tuple[pd.DataFrame, int]:
    """Consuming channels, fullest first: client, unacked against the prefetch limit, and marks for the
    dangerous settings (auto-ack, prefetch 0). Returns the top rows and how many matched in all."""
    columns = ["client", "channel", "vhost", "user", "unacked", "prefetch_limit", "fill", "mark", "queues"]
    if not snapshot:
        return pd.DataFrame(columns=columns), 0
    by_channel: dict[str, list[dict]] = {}
    for c in snapshot.get("consumers", []):
        by_channel.setdefault(c["channel"], []).append(c)
    rows = []
    for ch in snapshot.get("channels", []):
        consumers = by_channel.get(ch["name"], [])
        unacked = ch.get("messages_unacked") or 0
        if not consumers and not unacked:
            continue
        limit = ch.get("prefetch_limit")
        marks = []
        if any(c.get("ack_required") is False for c in consumers):
            marks.append("auto-ack")
        if not limit and any(c.get("ack_required") is not False for c in consumers):
            marks.append("prefetch 0")
        rows.append({"client": ch.get("identity") or ch.get("connection_name") or "(unnamed)", "channel": ch["name"],
                     "vhost": ch["vhost"],
                     "user": ch.get("user", ""), "unacked": unacked, "prefetch_limit": limit,
                     "fill": prefetch_fill(unacked, limit),
                     "mark": ", ".join(marks), "queues": ", ".join(sorted({c["queue"] for c in consumers}))})
    df = pd.DataFrame(rows, columns=columns)
    df = _search(df, search, ("client", "channel", "queues", "vhost"))
    df = df.sort_values(["fill", "unacked"], ascending=False, kind="stable")
    # The landing page's document (the exporter's /api/overview) holds only the fullest, and says how many in all.
    total = len(df) if search else snapshot.get("consuming_channels", len(df))
    return df.head(top).reset_index(drop=True), total


def receivers(snapshot: dict[str, Any] | None, search: str = "", top: int = 50) -> tuple[pd.DataFrame, int]:
    """AMQP 1.0 receivers, most unsettled first: client, unsettled deliveries against the link's credit, and marks
    for what bounds nothing (more unsettled than credit: credit granted as transfers arrive; pre-settled). The
    broker counts unsettled per session: a receiver sharing its session shows the session's count, said so."""
    columns = ["client", "link", "vhost", "queue", "unsettled", "credit", "mark", "connection"]
    if not snapshot:
        return pd.DataFrame(columns=columns), 0
    rows = []
    for k in snapshot.get("links", []):
        if k.get("role") != "receiver":
            continue
        held, credit = k.get("session_unsettled"), k.get("credit")
        marks = []
        if k.get("settled") is True:
            marks.append("pre-settled (at-most-once)")
        elif held is not None and credit is not None and held > credit:
            marks.append("credit bounds nothing")
        if k.get("session_receivers", 1) > 1:
            marks.append(f"unsettled: its session's {k['session_receivers']} receivers together")
        rows.append({"client": k.get("identity") or k.get("connection", ""), "link": k.get("name", ""),
                     "vhost": k.get("vhost", ""), "queue": k.get("queue") or "", "unsettled": held, "credit": credit,
                     "mark": ", ".join(marks), "connection": f"{k.get('connection', '')} (session {k.get('session')})"})
    df = pd.DataFrame(rows, columns=columns)
    df = _search(df, search, ("client", "link", "queue", "vhost"))
    df = df.sort_values("unsettled", ascending=False, kind="stable", na_position="last")
    return df.head(top).reset_index(drop=True), len(df)


BAR = 10  # blocks in a text bar of how full a prefetch is


def prefetch_rows(df: pd.DataFrame) -> pd.DataFrame:
    """prefetch()'s rows as text for a plain table, the fill as a bar of blocks and a percentage."""
    def bar(fill: float) -> str:
        if math.isinf(fill):
            return "█" * BAR + " no limit"
        blocks = round(min(fill, 1.0) * BAR)
        return "█" * blocks + "░" * (BAR - blocks) + f" {fill:.0%}"

    return pd.DataFrame({"client": df["client"], "channel": df["channel"], "vhost": df["vhost"],
                         "unacked": df["unacked"].map(str),
                         "prefetch limit": df["prefetch_limit"].map(lambda v: "-" if pd.isna(v) else str(int(v))),
                         "fill": df["fill"].map(bar), "mark": df["mark"], "queues": df["queues"]})


def redeliveries(snapshot: dict[str, Any] | None, previous: dict[str, Any] | None = None, search: str = "",
                 top: int = 50) -> tuple[pd.DataFrame, int]:
    """Queues that have redelivered, by redelivered share: counts since the queue's stats began, and the
    redelivery rate since the previous snapshot when there is one."""
    columns = ["queue", "vhost", "type", "redelivered", "delivered", "share", "redelivered (per s)", "consumers"]
    if not snapshot:
        return pd.DataFrame(columns=columns), 0
    before = {}
    elapsed = None
    if previous:
        before = {(q["vhost"], q["name"]): (q.get("message_stats") or {}).get("redeliver") for q in previous["queues"]}
        elapsed = snapshot["taken_at"] - previous["taken_at"]
    rows = []
    for q in snapshot.get("queues", []):
        stats = q.get("message_stats") or {}
        redelivered, delivered = stats.get("redeliver") or 0, stats.get("deliver_get") or 0
        if not redelivered:
            continue
        old = before.get((q["vhost"], q["name"]))
        rate = (redelivered - old) / elapsed if old is not None and elapsed and redelivered >= old else None
        rows.append({"queue": q["name"], "vhost": q["vhost"], "type": q.get("type"), "redelivered": redelivered,
                     "delivered": delivered, "share": redelivered / delivered if delivered else None,
                     "redelivered (per s)": None if rate is None else round(rate, 2),
                     "consumers": q.get("consumers")})
    df = _search(pd.DataFrame(rows, columns=columns), search, ("queue", "vhost"))
    df = df.sort_values(["share", "redelivered"], ascending=False, kind="stable", na_position="first")
    return df.head(top).reset_index(drop=True), len(df)


LATENCY_COLUMNS = ["target", "queue type", "persistent", "count", "p50 (ms)", "p90 (ms)", "p99 (ms)"]


def probe_latency(probes: list[dict[str, Any]], histogram: str = "confirm_latency_seconds") -> pd.DataFrame:
    """Per probe target: queue type, persistence, observations and p50/p90/p99 in milliseconds, to one decimal."""
    rows = []
    for p in probes:
        buckets = p["histograms"].get(histogram, [])
        count = buckets[-1][1] if buckets else 0
        row = {"target": p["target"], "queue type": p["queue_type"],
               "persistent": "persistent" if p["persistent"] else "transient", "count": int(count)}
        for name, q in (("p50 (ms)", 0.5), ("p90 (ms)", 0.9), ("p99 (ms)", 0.99)):
            v = histogram_quantile(buckets, q)
            row[name] = None if v is None else round(v * 1000, 1)
        rows.append(row)
    return pd.DataFrame(rows, columns=LATENCY_COLUMNS)


def batch_sizes(probes: list[dict[str, Any]]) -> pd.DataFrame:
    """Confirm frames per batch-size bucket and target (not cumulative), each bucket named by the sizes it holds
    ("1", "3-5", "over 1000"): many frames above 1 under load is the fsync batching signature. The buckets
    above the largest any target used are left out, so that a chart of them is not mostly empty."""
    rows = []
    for p in probes:
        previous, low = 0.0, 1
        for le, count in p["histograms"].get("confirm_batch_size", []):
            high = float(le)
            label = (f"over {low - 1:g}" if high == float("inf") else f"{low:g}" if high <= low
                     else f"{low:g}-{high:g}")
            rows.append({"target": p["target"], "batch size": label, "frames": count - previous})
            previous, low = count, int(high) + 1 if high != float("inf") else low
    df = pd.DataFrame(rows, columns=["target", "batch size", "frames"])
    bucket = df.groupby("target").cumcount()
    used = bucket[df["frames"] > 0]
    return df[bucket <= (used.max() if len(used) else -1)].reset_index(drop=True)


AUDIT = ("published", "confirmed", "delivered", "lost", "duplicates", "redelivered", "requeued", "nacked",
         "returned", "confirm_timeouts", "republished", "reconnects")


def probe_audit(probes: list[dict[str, Any]]) -> pd.DataFrame:
    """Per probe target: whether it is up, and its delivery audit counters."""
    rows = [{"target": p["target"], "up": p["up"], **{k: int(p["counters"].get(k, 0)) for k in AUDIT}}
            for p in probes]
    return pd.DataFrame(rows, columns=["target", "up", *AUDIT])


def nodes(snapshot: dict[str, Any] | None) -> pd.DataFrame:
    """Nodes with memory and disk against their alarm limits, and the alarms raised."""
    rows = []
    for n in (snapshot or {}).get("nodes", []):
        alarms = [name for name, on in (("memory", n.get("mem_alarm")), ("disk", n.get("disk_free_alarm"))) if on]
        rows.append({"node": n["name"], "running": n.get("running"),
                     "cannot reach": ", ".join(n.get("partitions") or []),
                     "memory used (MiB)": _mib(n.get("mem_used")), "memory limit (MiB)": _mib(n.get("mem_limit")),
                     "disk free (MiB)": _mib(n.get("disk_free")),
                     "disk free limit (MiB)": _mib(n.get("disk_free_limit")), "alarms": ", ".join(alarms)})
    return pd.DataFrame(rows, columns=["node", "running", "cannot reach", "memory used (MiB)", "memory limit (MiB)",
                                       "disk free (MiB)", "disk free limit (MiB)", "alarms"])


def degraded_queues(snapshot: dict[str, Any] | None) -> pd.DataFrame:
    """Replicated queues missing a replica: quorum queues with members offline, mirrored queues with mirrors
    out of sync; with where their leader and replicas are."""
    rows = []
    for q in (snapshot or {}).get("queues", []):
        members, online = q.get("members"), q.get("online")
        mirrors, synced = q.get("mirrors"), q.get("synchronised_mirrors")
        if members and online is not None:
            missing = [m for m in members if m not in online]
            replicas, behind = members, missing
        elif mirrors and synced is not None:
            replicas, behind = [q.get("node"), *mirrors], [m for m in mirrors if m not in synced]
        else:
            continue
        if behind:
            rows.append({"queue": q["name"], "vhost": q["vhost"], "type": q.get("type"), "leader": q.get("node"),
                         "replicas": ", ".join(r for r in replicas if r),
                         "missing or unsynchronised": ", ".join(behind),
                         "quorum": (len(members) - len(behind) > len(members) // 2) if members else None})
    return pd.DataFrame(rows, columns=["queue", "vhost", "type", "leader", "replicas", "missing or unsynchronised",
                                       "quorum"])


def blocked_connections(snapshot: dict[str, Any] | None) -> pd.DataFrame:
    """Connections whose publishers the broker holds back (blocked, blocking, or in flow control)."""
    rows = [{"client": c.get("identity") or c.get("connection_name") or "(unnamed)", "connection": c["name"],
             "vhost": c["vhost"],
             "user": c.get("user"), "state": c.get("state")}
            for c in (snapshot or {}).get("connections", []) if c.get("blocked")]
    return pd.DataFrame(rows, columns=["client", "connection", "vhost", "user", "state"])


SHOVEL_COLUMNS = ["kind", "name", "vhost", "state", "ack mode", "from", "to", "node", "why"]


def shovels(snapshot: dict[str, Any] | None) -> pd.DataFrame:
    """The broker's own movers of messages: each shovel with its ack mode (what it loses on a failure, unless
    on-confirm), where it moves from and to (URIs as the exporter has them, without their password) and its state;
    each federation link with its upstream, state and the broker's error. Not running first."""
    rows = []
    for v in (snapshot or {}).get("shovels", []):
        source = v.get("source_queue") or (f"exchange {v['source_exchange']}" if v.get("source_exchange") else "")
        target = v.get("destination_queue") or (f"exchange {v['destination_exchange']}"
                                                if v.get("destination_exchange") is not None else "")
        rows.append({"kind": f"{v.get('type', '')} shovel", "name": v["name"], "vhost": v.get("vhost") or "",
                     "state": v.get("state") or "unknown", "ack mode": v.get("ack_mode") or "unknown",
                     "from": f"{source} at {v.get('source_uri') or '?'}",
                     "to": f"{target} at {v.get('destination_uri') or '?'}", "node": v.get("node") or "",
                     "why": v.get("reason") or ""})
    for k in (snapshot or {}).get("federation_links", []):
        rows.append({"kind": f"federation link ({k['type']})", "name": k["upstream"], "vhost": k["vhost"],
                     "state": k["status"], "ack mode": "", "from": f"{k['upstream_name']} at {k.get('uri') or '?'}",
                     "to": k["local"], "node": k.get("node") or "", "why": k.get("error") or ""})
    df = pd.DataFrame(rows, columns=SHOVEL_COLUMNS)
    moving = df["state"].isin(["running", "flow"])
    return pd.concat([df[~moving], df[moving]], ignore_index=True)


BREAK_COLUMNS = ["time", "kind", "reason", "client", "vhost", "channel", "queue", "broker said"]


def breaks(document: dict[str, Any], search: str = "") -> pd.DataFrame:
    """The window's events from /api/breaks, newest first: when (UTC), what (a channel error, a consumer timeout,
    a connection opened or closed), why, whose (the name its connection was given, else its library and peer)."""
    rows = []
    for e in document.get("events") or []:
        peer = (e.get("connection") or "").split(" -> ")[0]
        rows.append({"time": datetime.fromtimestamp(e["at"], UTC), "kind": e["kind"].replace("_", " "),
                     "reason": e.get("cause") or "", "vhost": e.get("vhost") or "",
                     "client": e.get("connection_name") or " from ".join(p for p in (e.get("client"), peer) if p),
                     "channel": e.get("channel"), "queue": e.get("queue") or "", "broker said": e.get("text") or ""})
    df = pd.DataFrame(rows, columns=BREAK_COLUMNS)
    df = _search(df, search, ("client", "vhost", "reason", "queue", "kind"))
    return df.sort_values("time", ascending=False, kind="stable").reset_index(drop=True)


def _search(df: pd.DataFrame, text: str, columns: tuple[str, ...]) -> pd.DataFrame:
    if not text or df.empty:
        return df
    hit = pd.Series(False, index=df.index)
    for c in columns:
        hit |= df[c].astype(str).str.contains(text, case=False, regex=False)
    return df[hit]


def _mib(v: int | None) -> float | None:
    return None if v is None else round(v / 2**20, 1)


TRACE_COLUMNS = ["destination", "publisher", "queue", "published", "delivered", "queue time p50", "queue time p99",
                 "processing p99", "duplicates", "waiting", "gone", "unplaced", "oldest unprocessed (s)", "consumers"]


def traces(document: dict[str, Any], search: str = "") -> pd.DataFrame:
    """/api/traces' destinations, worst first as the exporter orders them (gone, waiting, then the slowest p99):
    per destination and publishing service, what its messages became, by the applications' own spans."""
    rows = [{"destination": f["destination"], "publisher": f["service"], "queue": f.get("queue") or "",
             "published": f["published"], "delivered": f["delivered"],
             "queue time p50": f.get("queue_time_p50") or "", "queue time p99": f.get("queue_time_p99") or "",
             "processing p99": f.get("processing_p99") or "", "duplicates": f["duplicates"],
             "waiting": f["waiting"], "gone": f["gone"], "unplaced": f["unplaced"],
             "oldest unprocessed (s)": f["oldest_unprocessed_s"] or None, "consumers": ", ".join(f["consumers"])}
            for f in document.get("flows") or []]
    return _search(pd.DataFrame(rows, columns=TRACE_COLUMNS), search,
                   ("destination", "publisher", "queue", "consumers")).reset_index(drop=True)
