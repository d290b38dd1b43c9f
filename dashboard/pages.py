"""The dashboard's pages. Settings come from the environment `ackscope dashboard` starts Streamlit with:
ACKSCOPE_EXPORTERS (or ACKSCOPE_EXPORTER_URL), ACKSCOPE_REPORTS, ACKSCOPE_PROMETHEUS_URL, ACKSCOPE_REFRESH, and
the exporters' web credentials (ACKSCOPE_WEB_USERNAME, ACKSCOPE_WEB_PASSWORD or ACKSCOPE_WEB_PASSWORD_FILE)."""

from __future__ import annotations

import os
import re
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from html import escape
from urllib.parse import quote

import pandas as pd
import streamlit as st

from ackscope.dashboard import charts, reports, views
from ackscope.dashboard.settings import Exporter, Settings
from ackscope.dashboard.source import DOCUMENTS, LANDING, ExporterSource, Live, latest_side_by_side
from ackscope.model.traces import TRACES

TOP = 50


@st.cache_resource
def _source(url: str, auth: tuple[str, str] | None, documents: tuple[str, ...] = DOCUMENTS) -> ExporterSource:
    # One per exporter and set of documents for the whole server: every browser session shares its last good data.
    # The landing pages ask for what they show (/api/overview), a broker's other pages for everything.
    return ExporterSource(url, auth, documents=documents)


@st.cache_resource
def _probe_history(url: str) -> deque:
    # The probes' histograms at each refresh, so the Confirms page can show percentiles over time.
    return deque(maxlen=720)


def _settings() -> Settings:
    return Settings.from_environ(os.environ)


def _selected() -> Exporter:
    """The broker the pages show: ?broker=NAME (the landing page of several links each so, and the sidebar
    chooses), else the first."""
    exporters = {e.name: e for e in _settings().exporters}
    return exporters.get(st.query_params.get("broker", ""), next(iter(exporters.values())))


def _broker_choice() -> None:
    """With several brokers, the sidebar's choice of the one the pages show."""
    names = [e.name for e in _settings().exporters]
    if len(names) > 1:
        chosen = st.sidebar.selectbox("Broker", names, index=names.index(_selected().name))
        st.query_params["broker"] = chosen


def _live(exporter: Exporter, documents: tuple[str, ...], every: float) -> Live:
    s = _settings()
    source = _source(exporter.url, s.auth, documents)
    # The landing page shows what the background last fetched (at most `every` old) and waits on no exporter;
    # the other pages, opened to look closer, fetch as they load.
    data = source.latest(every) if documents == LANDING else source.fetch()
    history = _probe_history(exporter.url)
    if data.error is None and data.probes and (not history or history[-1][0] != data.fetched_at):
        history.append((data.fetched_at, data.probes))
    return data


def _banner(data: Live, exporter: Exporter) -> None:
    if data.error:
        age = f"from {_ago(data.fetched_at)} ago" if data.fetched_at else "none yet"
        st.error(f"{data.error}. Showing the last good data ({age}): **stale**.")
    elif data.exporter_error:
        st.warning(f"The exporter cannot poll the broker: {data.exporter_error}. Its last good snapshot is "
                   "shown: **stale**.")
    if data.snapshot:
        updated = datetime.fromtimestamp(data.fetched_at, UTC).strftime("%H:%M:%S UTC") if data.fetched_at else "-"
        # A caption shows Markdown's escapes as typed: the name (one word, no '#') and URL (checked at the start)
        # go as they are.
        named = f"broker **{exporter.name}** · " if len(_settings().exporters) > 1 else ""
        st.caption(f"{named}Updated {updated} · broker snapshot taken {_ago(data.snapshot['taken_at'])} ago · "
                   f"exporter {exporter.url} · {views.source_said(data.source)}")
        unread = data.snapshot.get("unread") or []
        if unread and not data.stale:
            st.warning("Partial: " + "; ".join(u["message"] for u in unread) + ". The rest is shown; the rules "
                       "that need what is missing are not evaluated.")


def _refresh_every() -> float:
    """The live pages' refresh interval: --refresh, changeable in the sidebar."""
    default = _settings().refresh
    return st.sidebar.select_slider("Refresh every (seconds)", options=sorted({5.0, 10.0, 30.0, 60.0, default}),
                                    value=default, key="refresh")


def _ago(t: float) -> str:
    return str(timedelta(seconds=int(max(0, time.time() - t))))


def _table(df: pd.DataFrame, **kw) -> None:
    st.dataframe(df, hide_index=True, width="stretch", **kw)


_COLOUR = {"critical": "red", "warning": "orange", "info": "blue"}
_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~])")
CARDS = 5


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NAMED = {"\n": "n", "\r": "r", "\t": "t"}


def _md(text: str) -> str:
    """`text` shown as itself in Markdown: its Markdown and HTML escaped, and a control character (a line
    break in a client's name would split a table row) shown as its escape, \\n or \\x07."""
    escaped = _MARKDOWN.sub(r"\\\1", text)
    return _CONTROL.sub(lambda m: "\\\\" + _NAMED.get(m.group(), f"x{ord(m.group()):02x}"), escaped)


def _findings_section(data: Live, min_severity: str = "warning") -> None:
    """The worst findings as cards to read at a glance, and how many there are."""
    found = views.findings(data.findings, min_severity)
    if found.empty:
        st.success(f"No findings at {min_severity} or above.")
        return
    st.subheader(f"What is wrong: {len(found)} finding(s) — {_by_severity(found)}")
    for f in views.cards(data.findings, min_severity, CARDS):
        since = f" · since {f['since']} ({f['for']})" if f["since"] else ""
        # One Markdown element a card: each element is a component the browser mounts and lays out on its own,
        # and three a card cost a fresh browser's landing page more than the cards' text (docs/benchmarks.md).
        parts = [f":{_COLOUR.get(f['severity'], 'gray')}[**{_md(f['severity'])}**] · **{_md(f['rule'])}** — "
                 f"**{_md(f['culprit'])}**{_md(since)}",
                 _evidence_table(f["evidence"]) if f["evidence"] else None,
                 f"*Remedy:* {_md(f['remedy'])}"]
        with st.container(border=True):
            st.markdown("\n\n".join(p for p in parts if p))


def _by_severity(found: pd.DataFrame) -> str:
    """How many findings of each severity, worst first: "1 critical, 6 warning"."""
    counts = found["severity"].value_counts()
    return ", ".join(f"{counts[s]} {s}" for s in views.SEVERITY_ORDER if s in counts)


def _evidence_table(rows: list[tuple[str, str]]) -> str:
    """A finding's evidence as a two-column Markdown table: what, in words, and its value with its unit."""
    return _markdown_table(pd.DataFrame(rows, columns=["evidence", ""]))


def _all_findings_link(data: Live) -> None:
    """A plain link to the Findings page: the interactive table of them all costs a fresh browser a script of its
    own, about 0.2 s of the landing page's first view at 5,000 queues (docs/benchmarks.md)."""
    if data.findings:
        broker = st.query_params.get("broker")
        target = "findings" + (f"?broker={quote(broker)}" if broker else "")
        # In this tab, as the page of several brokers links each (Markdown's links open a new one).
        st.markdown(f'<a href="{target}" target="_self">All {len(data.findings)} findings, info included, to search '
                    'and sort: Findings</a>', unsafe_allow_html=True)


def _not_evaluated_section(data: Live) -> None:
    """The rules this source cannot feed: named, so their silence is not read as health."""
    if data.not_evaluated:
        st.info("Not evaluated, the source does not report what they need or they cannot apply to this "
                "release: " + _not_evaluated(data.not_evaluated))


def _not_evaluated(items: list[dict]) -> str:
    """Each rule not evaluated, and why: what it needs, or why it cannot apply. The trace rules, waiting for the
    applications' spans that most brokers' users never send, are one clause, not five."""
    tracing = [n["rule"] for n in items if n.get("needs") == [TRACES]]
    said = [f"**{_md(n['rule'])}** (" + (_md(n['why']) if n.get('why') else f"needs {_md(', '.join(n['needs']))}")
            + ")" for n in items if n["rule"] not in tracing]
    if tracing:
        said.append(f"the {len(tracing)} trace rules ({', '.join(_md(r) for r in tracing)}): no application sends "
                    "its OpenTelemetry spans to /v1/traces")
    return "; ".join(said)


def _prefetch_section(data: Live, search: str = "", top: int = 15, chart: bool = True) -> None:
    """The fullest consuming channels, each with a bar for how full its prefetch is: with `chart`, plotly's
    chart of unacked against the limit and the interactive table (the Consumers & prefetch page); without, a
    plain table, for the landing page's first view. Measured in chromium, plotly's script is a 0.8-1.0 s task
    before it draws anything and the interactive table's another 0.5-1.0 s, and what follows either on the
    page waits for it (docs/dashboard.md)."""
    df, total = views.prefetch(data.snapshot, search, top)
    st.subheader("Unacked against prefetch")
    if df.empty:
        st.info("No consuming channels." if not search else f"No consuming channel matches {search!r}.")
        return
    if chart:
        st.plotly_chart(charts.unacked_vs_prefetch(df), key=f"prefetch-{search}-{top}")
    st.caption(f"The {len(df)} fullest of {total} consuming channels. Fill: unacked against the prefetch limit "
               "that binds the channel's consumers; a mark (auto-ack, prefetch 0) where nothing limits what the "
               "client holds.")
    if not chart:
        st.markdown(_markdown_table(views.prefetch_rows(df)))
        return
    _table(df, column_config={"fill": st.column_config.ProgressColumn(
        "fill", min_value=0.0, max_value=1.0, format="percent",
        help="unacked / prefetch limit; full where nothing limits the client")})


def _receivers_section(data: Live, search: str = "", top: int = 15) -> None:
    """AMQP 1.0 receivers beside the channels: their unsettled deliveries against their link credit. Shown where
    the broker has any (RabbitMQ 4.1 and later list them)."""
    df, total = views.receivers(data.snapshot, search, top)
    if df.empty:
        return
    st.subheader("AMQP 1.0 receivers: unsettled against credit")
    st.caption(f"The {len(df)} most unsettled of {total} AMQP 1.0 receivers. Credit is what the broker may still "
               "send; a client that grants it again as transfers arrive is bounded by nothing (marked).")
    _table(df)


def _consumers_section(data: Live, search: str = "", top: int = 15) -> None:
    _prefetch_section(data, search, top)
    _receivers_section(data, search, top)


def _markdown_table(df: pd.DataFrame) -> str:
    """A DataFrame of strings as a Markdown table, every cell escaped."""
    head = "| " + " | ".join(_md(str(c)) for c in df.columns) + " |"
    rule = "|" + "---|" * len(df.columns)
    rows = ("| " + " | ".join(_md(v) for v in row) + " |" for row in df.itertuples(index=False))
    return "\n".join([head, rule, *rows])


def _redelivery_section(data: Live, search: str = "", top: int = 10) -> None:
    df, total = views.redeliveries(data.snapshot, data.previous, search, top)
    st.subheader("Queues with redeliveries")
    if df.empty:
        st.info("No queue has redelivered.")
        return
    st.plotly_chart(charts.redeliveries(df), key=f"redeliveries-{search}-{top}")
    st.caption(f"{len(df)} of {total} queues with redeliveries, highest redelivered share first.")
    _table(df)


def _latency_section(data: Live) -> None:
    st.subheader("Probe confirm latency")
    df = views.probe_latency(data.probes)
    if df.empty:
        st.info("No probes: start the exporter with --amqp-url to measure confirm latency.")
        return
    st.plotly_chart(charts.probe_latency(df), key="latency")
    _table(df)


def _live_page(render: Callable[[Live], None], documents: tuple[str, ...] = DOCUMENTS) -> None:
    """Refresh `render` in place every interval: fetch (or reuse) the chosen broker's exporter's `documents`,
    say whether they are stale, then draw them."""
    exporter = _selected()
    every = _refresh_every()

    @st.fragment(run_every=every)
    def body():
        data = _live(exporter, documents, every)
        _banner(data, exporter)
        render(data)
    body()


def overview() -> None:
    st.title("ackscope — what is wrong, who causes it")

    def render(data: Live) -> None:
        _findings_section(data)
        _not_evaluated_section(data)
        _prefetch_section(data, chart=False)
        _all_findings_link(data)
        left, right = st.columns(2)
        with left:
            _redelivery_section(data)
        with right:
            _latency_section(data)
    _live_page(render, LANDING)


def findings() -> None:
    st.title("Findings")
    search = st.text_input("Search rule, culprit or vhost", key="finding-search")

    def render(data: Live) -> None:
        found = views.findings(data.findings)
        if search:
            text = found["rule"] + " " + found["culprit"] + " " + found["vhost"]
            found = found[text.str.contains(search, case=False, regex=False)]
        if found.empty:
            st.success("No findings." if not search else f"No finding matches {search!r}.")
        else:
            st.subheader(f"{len(found)} finding(s), worst first — {_by_severity(found)}")
            _table(found)
        _not_evaluated_section(data)
    # What the landing page fetches holds every finding: the two share one fetch in the background.
    _live_page(render, LANDING)


BROKERS_TOP = 20  # the landing page of several: its table of the worst findings
_STATE_COLOUR = {"critical": "red", "unreadable": "red", "warning": "orange", "ok": "green"}


def brokers() -> None:
    """The landing page of several brokers: each broker's state worst first, a link to its pages, and every
    broker's findings worst first, from each exporter's /api/overview."""
    st.title("ackscope — every broker, worst first")

    every = _refresh_every()

    @st.fragment(run_every=every)
    def body():
        s = _settings()
        # What the background last fetched from each: a page load waits on no exporter (ExporterSource.latest).
        fetched = latest_side_by_side([_source(e.url, s.auth, ("overview",)) for e in s.exporters], every)
        table, found = views.brokers([(e.name, live) for e, live in zip(s.exporters, fetched)])
        for row in table.to_dict("records"):
            counts = ", ".join(f"{row[k]} {k}" for k in ("critical", "warning") if row[k]) or "no findings"
            worst = f" · worst: {_md(row['worst'])}" if row["worst"] else ""
            st.markdown(f":{_STATE_COLOUR[row['state']]}[**{row['state']}**] · **{_md(row['broker'])}** — "
                        f"{counts}{worst}")
            if row["problem"]:
                st.text(row["problem"])  # as plain text: Markdown would show a URL's escapes as typed
            # A plain link in this tab (Markdown's open a new one): st.page_link cost the page 0.3 s in chromium
            # before it showed anything, at three links; the broker's Overview loads in a second after the click.
            name = row["broker"]
            st.markdown(f'<a href="overview?broker={quote(name)}" target="_self">Open {escape(name)}</a>',
                        unsafe_allow_html=True)
        if found.empty:
            st.success("No findings at warning or above on any broker that answers.")
        else:
            # A plain table of the worst: an interactive one costs the browser 0.3-0.5 s before it shows anything
            # of the page (measured at 5,000 queues, docs/dashboard.md); each broker's Findings page has them all.
            st.subheader(f"Every broker's findings, worst first: {len(found)}")
            shown = found.head(BROKERS_TOP)
            st.caption(f"The worst {len(shown)} of {len(found)} at warning and above; each broker's Findings page "
                       "lists all of its own.")
            st.markdown(_markdown_table(shown[["broker", "severity", "rule", "culprit", "for", "vhost"]].fillna("")))
    body()


def confirms() -> None:
    st.title("Confirms")

    def render(data: Live) -> None:
        _latency_section(data)
        samples = list(_probe_history(_selected().url))
        over_time = reports.percentiles_over_time(samples)
        if not over_time.empty:
            st.plotly_chart(charts.over_time(over_time, "time", ["p50_ms", "p99_ms"], "target",
                                             "Confirm latency between refreshes", "ms"), key="latency-over-time")
        sizes = views.batch_sizes(data.probes)
        if not sizes.empty:
            st.plotly_chart(charts.batch_sizes(sizes), key="batches")
            st.caption("One basic.ack may settle many messages (multiple=true). Under a burst, a queue that "
                       "syncs to disk before confirming answers in batches, one per fsync: many frames above 1 "
                       "are that batching, and the latency of each message includes the wait for its batch.")
        audit = views.probe_audit(data.probes)
        if not audit.empty:
            st.subheader("Nacks, returns and timeouts")
            _table(audit[["target", "published", "confirmed", "nacked", "returned", "confirm_timeouts"]])
    _live_page(render)


def _top_n_page(title: str, search_label: str, search_key: str, top_label: str,
                section: Callable[[Live, str, int], None], rules: tuple[str, ...]) -> None:
    """A page over many objects: a search box and a top-N choice, the section they filter, and the findings
    of the rules about those objects."""
    st.title(title)
    search = st.text_input(search_label, key=search_key)
    top = st.select_slider(top_label, options=[10, 25, 50, 100, 200], value=TOP)

    def render(data: Live) -> None:
        section(data, search, top)
        _findings_by_rule(data, rules)
    _live_page(render)


def consumers() -> None:
    _top_n_page("Consumers & prefetch", "Search client, channel, queue or vhost", "consumer-search",
                "Show the fullest", _consumers_section,
                ("prefetch-unlimited", "auto-ack-consumer", "prefetch-saturated", "prefetch-one",
                 "receiver-unsettled-unbounded", "receiver-presettled"))


def redelivery() -> None:
    _top_n_page("Redeliveries & requeue loops", "Search queue or vhost", "queue-search", "Show the top",
                _redelivery_section, ("requeue-loop", "probe-duplicates"))


BREAK_RULES = ("consumer-stalled", "consumer-timed-out", "consumer-cancelled-by-broker", "closed-on-error",
               "connection-churn")


def breaks() -> None:
    st.title("Breaks: closed channels, timeouts, cancels, churn")
    search = st.text_input("Search client, vhost, reason or queue", key="break-search")

    def render(data: Live) -> None:
        sources = data.breaks.get("sources") or []
        for problem in data.breaks.get("problems") or []:
            st.warning(f"Not read: {problem}")
        if "broker log" not in sources:
            st.info("Why the broker closed channels and connections is not known: start the exporter with "
                    "--broker-log PATH (the node's log file, or - for standard input, e.g. kubectl logs -f). "
                    "Stalled consumers, silent cancels and churn are still judged from polls, below" +
                    ("; the event exchange names the clients that open and close connections and channels."
                     if sources else "."))
        events = views.breaks(data.breaks, search)
        if not events.empty:
            st.plotly_chart(charts.breaks_timeline(events), key="breaks-timeline")
            st.caption(f"{len(events)} event(s) over the window, told by: {', '.join(sources)}.")
            _table(events.head(200))
        elif sources:
            st.success("No channel or connection closed by the broker, and no consumer timed out, over the window.")
        _findings_by_rule(data, BREAK_RULES)
    _live_page(render)


TRACE_RULES = ("trace-queue-time-high", "trace-messages-unprocessed", "trace-duplicate-deliveries", "trace-clock-skew",
               "trace-sampling-incomplete")


def traces() -> None:
    st.title("Traced messages: queue time, unprocessed, duplicates")
    search = st.text_input("Search destination, service or queue", key="trace-search")

    def render(data: Live) -> None:
        document = data.traces or {}
        intake = document.get("intake") or {}
        received = sum(n for shape, n in (intake.get("spans") or {}).items() if shape != "other")
        if not received:
            st.info("No messaging spans received: point the applications' OpenTelemetry exporters (or a Collector's "
                    "otlphttp exporter) at this exporter's /v1/traces, or start it with --traces-dir.")
            return
        flows = views.traces(document, search)
        gone, waiting = int(flows["gone"].sum()), int(flows["waiting"].sum())
        if gone:
            st.error(f"{gone} traced message(s) had no delivery within {intake.get('deadline_s', 0):g} s and are no "
                     "longer in their queue: see the findings below.")
        elif waiting:
            st.warning(f"{waiting} traced message(s) wait in their queue past the deadline.")
        if not intake.get("unprocessed_known", True):
            st.info("Deliveries arrive without their publish span (independent sampling): unprocessed messages "
                    "are not judged.")
        _table(flows.head(TOP))
        st.caption(f"Spans received: {', '.join(f'{n} {shape}' for shape, n in sorted(intake['spans'].items()))}; "
                   f"not understood {intake.get('not_understood', 0)}, dropped {intake.get('dropped', 0)}, "
                   f"requests refused {intake.get('rejected_requests', 0)}. Queue time: from the publish span's "
                   "start to the first delivery's, in histogram buckets.")
        _findings_by_rule(data, TRACE_RULES)
    _live_page(render)


def probe_audit() -> None:
    st.title("Probe audit")

    def render(data: Live) -> None:
        audit = views.probe_audit(data.probes)
        if audit.empty:
            st.info("No probes: start the exporter with --amqp-url.")
            return
        lost = int(audit["lost"].sum())
        if lost:
            st.error(f"{lost} confirmed message(s) were never delivered: the broker lost them.")
        else:
            st.success("Every confirmed message was delivered (or is still within its loss deadline).")
        _table(audit)
    _live_page(render)


def history() -> None:
    st.title("History")
    s = _settings()
    if not s.reports and not s.prometheus_url:
        st.info("Start the dashboard with --reports DIR (the pipeline's --out) or --prometheus-url for history.")
        return
    if s.reports:
        _reports_history(s.reports)
    if s.prometheus_url:
        _prometheus_history(s.prometheus_url)


def _reports_history(root: str) -> None:
    loaded = reports.load(root)
    for problem in loaded.problems:
        st.warning(problem)
    summary = loaded.summary
    if summary:
        st.caption(f"Pipeline run over {summary.get('data_dir')}: {summary.get('files_read')} files read, "
                   f"{summary.get('files_skipped')} skipped, {summary.get('rows', 0):,} rows.")
    latency = loaded.tables.get("confirm_latency")
    if latency is not None and not latency.empty:
        first, last = latency["window_start"].min().date(), latency["window_start"].max().date()
        chosen = st.date_input("Dates", (first, last), min_value=first, max_value=last)
        start, end = (chosen if isinstance(chosen, tuple) and len(chosen) == 2 else (first, last))
        shown = reports.between(latency, "window_start", start, end)
        shown = shown.assign(p50_ms=shown["p50_s"] * 1000, p99_ms=shown["p99_s"] * 1000)
        st.plotly_chart(charts.over_time(shown, "window_start", ["p50_ms", "p99_ms"], "probe",
                                         "Confirm latency per window (pipeline)", "ms"), key="history-latency")
    for name, title in (("delivery_audit", "Delivery audit"), ("lost_messages", "Lost messages"),
                        ("out_of_order_messages", "Messages first delivered out of publish order"),
                        ("prefetch_saturation", "Prefetch saturation"), ("redelivery_hotspots", "Redelivery hot spots"),
                        ("publisher_safety", "Publishers and how they protect messages")):
        df = loaded.tables.get(name)
        if df is not None and not df.empty:
            st.subheader(title)
            _table(df.head(200))


def _prometheus_history(url: str) -> None:
    hours = st.select_slider("Prometheus range (hours)", options=[1, 6, 24, 72, 168], value=24)
    result = reports.prometheus_confirm_p99(url, hours)
    if isinstance(result, str):
        st.warning(result)
    elif result.empty:
        st.info(f"Prometheus at {url} has no probe confirm latency in the last {hours} h.")
    else:
        st.plotly_chart(charts.over_time(result, "time", ["p99_ms"], "target",
                                         f"Probe confirm latency p99, last {hours} h (Prometheus)", "ms"),
                        key="prometheus-p99")


def _no_snapshot_yet(data: Live) -> bool:
    """Whether the exporter has no snapshot to show yet, said on the page."""
    if not data.snapshot:
        st.info("No snapshot from the exporter yet.")
    return not data.snapshot


def broker() -> None:
    st.title("Broker")

    def render(data: Live) -> None:
        if _no_snapshot_yet(data):
            return
        overview = data.snapshot.get("overview", {})
        st.caption(f"RabbitMQ {overview.get('rabbitmq_version')} · Erlang {overview.get('erlang_version')} · "
                   f"cluster {overview.get('cluster_name')}")
        st.subheader("Nodes and alarms")
        _table(views.nodes(data.snapshot))
        _table_or_all_clear("Replicated queues missing a replica", views.degraded_queues(data.snapshot),
                            "Every replicated queue has all its replicas (or the broker has none).")
        _table_or_all_clear("Blocked connections", views.blocked_connections(data.snapshot),
                            "No connection is blocked.")
        moving = views.shovels(data.snapshot)
        if not moving.empty:  # most brokers have none: no empty section for them
            st.subheader("Shovels and federation links")
            _table(moving)
        for note in data.snapshot.get("notes", []):
            st.caption(note)
    _live_page(render)


def upgrade() -> None:
    st.title("Upgrade: what the next releases change, per client")

    def render(data: Live) -> None:
        if _no_snapshot_yet(data):
            return
        version = data.snapshot.get("overview", {}).get("rabbitmq_version") or "of an unknown version"
        if not data.upgrades:
            st.success(f"RabbitMQ {version} already runs the newest release ackscope knows: nothing to predict.")
        st.caption(f"Predicted on today's RabbitMQ {version} from the table of release changes, each proven on its "
                   "release by ackscope's suite (docs/upgrade.md); `ackscope upgrade-check --to RELEASE` prints the "
                   "same.")
        for outlook in data.upgrades:
            items = views.upgrade(outlook["findings"])
            critical = int((items["severity"] == "critical").sum())
            st.subheader(f"To RabbitMQ {outlook['to']}: " + (
                f"{len(items)} item(s), {critical} refused or losing messages" if len(items) else "nothing found"))
            if items.empty and not outlook["not_evaluated"]:
                st.success(f"Nothing RabbitMQ {outlook['to']} changes meets a client of this broker.")
            elif not items.empty:
                _table(items)
            if outlook["not_evaluated"]:
                st.warning("Not judged, so no item of theirs means nothing: "
                           + _not_evaluated(outlook["not_evaluated"]))
    _live_page(render)


def _table_or_all_clear(title: str, df: pd.DataFrame, all_clear: str) -> None:
    st.subheader(title)
    if df.empty:
        st.success(all_clear)
    else:
        _table(df)


def _findings_by_rule(data: Live, rules: tuple[str, ...]) -> None:
    found = views.findings([f for f in data.findings if f["rule"] in rules])
    if not found.empty:
        st.subheader("Findings")
        _table(found)


PAGES = {"overview": overview, "findings": findings, "confirms": confirms, "consumers": consumers,
         "redeliveries": redelivery, "breaks": breaks, "traces": traces, "audit": probe_audit, "history": history,
         "broker": broker, "upgrade": upgrade}


def one(name: str) -> None:
    """Render one page alone (what the page tests run)."""
    PAGES[name]()


def main() -> None:
    st.set_page_config(page_title="ackscope", layout="wide")
    several = len(_settings().exporters) > 1
    # With several brokers the landing page is all of them; each broker's Overview is its own landing page.
    every = st.Page(brokers, title="All brokers", url_path="brokers", default=True)
    pages = [*([every] if several else []),
             st.Page(overview, title="Overview", url_path="overview", default=not several),
             st.Page(findings, title="Findings", url_path="findings"),
             st.Page(confirms, title="Confirms", url_path="confirms"),
             st.Page(consumers, title="Consumers & prefetch", url_path="consumers"),
             st.Page(redelivery, title="Redeliveries & requeue loops", url_path="redeliveries"),
             st.Page(breaks, title="Breaks", url_path="breaks"),
             st.Page(traces, title="Traced messages", url_path="traces"),
             st.Page(probe_audit, title="Probe audit", url_path="audit"),
             st.Page(history, title="History", url_path="history"),
             st.Page(broker, title="Broker", url_path="broker"),
             st.Page(upgrade, title="Upgrade", url_path="upgrade")]
    chosen = st.navigation(pages)
    if chosen.title != every.title:  # the page of every broker has no broker to choose
        _broker_choice()
    chosen.run()
