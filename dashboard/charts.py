"""Plotly figures for the dashboard's tables (pure: DataFrame in, figure out)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

_LAYOUT = dict(margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.2))


def unacked_vs_prefetch(df: pd.DataFrame) -> go.Figure:
    """Unacked deliveries per consuming channel as bars, each channel's prefetch limit as a marker; channels
    with auto-ack or prefetch 0 in red, since nothing limits what they hold."""
    labels = [f"{r.client} · {r.queues or r.channel}" for r in df.itertuples()]
    colours = ["#d62728" if r.mark else ("#ff7f0e" if r.prefetch_limit and r.unacked >= r.prefetch_limit
                                         else "#1f77b4") for r in df.itertuples()]
    fig = go.Figure()
    fig.add_bar(y=labels, x=df["unacked"], orientation="h", name="unacked", marker_color=colours,
                text=[r.mark for r in df.itertuples()], textposition="outside",
                hovertemplate="%{y}<br>unacked %{x}<extra></extra>")
    limited = df[df["prefetch_limit"].notna() & (df["prefetch_limit"] > 0)]
    fig.add_scatter(y=[labels[i] for i in limited.index], x=limited["prefetch_limit"], mode="markers",
                    name="prefetch limit", marker=dict(symbol="line-ns-open", size=22, line=dict(width=3),
                                                       color="black"),
                    hovertemplate="%{y}<br>prefetch limit %{x}<extra></extra>")
    fig.update_layout(title="Unacked against prefetch, per consuming channel", height=max(260, 28 * len(df) + 120),
                      yaxis=dict(autorange="reversed"), xaxis_title="messages", **_LAYOUT)
    return fig


def probe_latency(df: pd.DataFrame, title: str = "Probe confirm latency") -> go.Figure:
    """p50/p90/p99 per probe target (classic against quorum, persistent against transient)."""
    labels = [f"{target} ({kind}, {persistent})"
              for target, kind, persistent in zip(df["target"], df["queue type"], df["persistent"])]
    fig = go.Figure()
    for name in ("p50", "p90", "p99"):
        fig.add_bar(x=labels, y=df[f"{name} (ms)"], name=name, hovertemplate="%{x}<br>%{y:.1f} ms")
    fig.update_layout(title=title, barmode="group", yaxis_title="ms", height=340, **_LAYOUT)
    return fig


def batch_sizes(df: pd.DataFrame) -> go.Figure:
    """Confirm frames per batch-size bucket and target: the buckets as categories ("1", "3-5", "over 1000"), in
    order, so that each bar stands over its bucket rather than at a number on an axis to 1,000."""
    fig = go.Figure()
    for target, rows in df.groupby("target", sort=True):
        fig.add_bar(x=rows["batch size"], y=rows["frames"], name=target)
    fig.update_layout(title="Confirm frames by batch size (messages one basic.ack settled)", barmode="group",
                      xaxis_title="batch size (messages)", yaxis_title="frames", height=340, **_LAYOUT)
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=list(dict.fromkeys(df["batch size"])))
    return fig


def redeliveries(df: pd.DataFrame) -> go.Figure:
    """Redelivered against delivered per queue."""
    fig = go.Figure()
    fig.add_bar(y=df["queue"], x=df["delivered"], name="delivered", orientation="h")
    fig.add_bar(y=df["queue"], x=df["redelivered"], name="redelivered", orientation="h", marker_color="#d62728")
    fig.update_layout(title="Queues that redeliver", barmode="overlay", height=max(240, 28 * len(df) + 120),
                      yaxis=dict(autorange="reversed"), xaxis_title="messages", **_LAYOUT)
    return fig


def breaks_timeline(df: pd.DataFrame) -> go.Figure:
    """Each break as a mark in time, one row per client, its colour the reason: when a client's channels were
    closed, its consumers timed out, its connections churned."""
    fig = go.Figure()
    for (kind, reason), rows in df.groupby(["kind", "reason"], sort=True):
        fig.add_scatter(x=rows["time"], y=rows["client"], mode="markers", name=f"{kind}: {reason}",
                        customdata=rows[["broker said"]].to_numpy(),
                        hovertemplate="%{y}<br>%{x}<br>%{customdata[0]}<extra></extra>")
    fig.update_layout(title="Breaks over the window, per client", height=max(280, 30 * df["client"].nunique() + 140),
                      yaxis=dict(autorange="reversed"), **_LAYOUT)
    return fig


def over_time(df: pd.DataFrame, x: str, ys: list[str], colour: str, title: str, y_title: str) -> go.Figure:
    """One line per `colour` value and y column, over `x`."""
    fig = go.Figure()
    for key, rows in df.sort_values(x).groupby(colour, sort=True):
        for y in ys:
            # p50_ms → "p50": the unit is the axis's title.
            name = f"{key} {y.removesuffix('_ms')}" if len(ys) > 1 else str(key)
            fig.add_scatter(x=rows[x], y=rows[y], mode="lines", name=name)
    fig.update_layout(title=title, yaxis_title=y_title, height=340, **_LAYOUT)
    return fig
