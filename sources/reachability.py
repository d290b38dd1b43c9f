"""Which cluster members each node can reach, from what the nodes say themselves. A node lists the members it
cannot reach as not running: under a partition both sides run, and each calls the other down. Where a node's own
Prometheus plugin answers in the same poll it runs, whatever another says; the plugin counts the peers it cannot
reach (3.13 and later). And where the release lists no partition (4.x under Khepri lists `partitions: []`
whatever happens), the sides are inferred from the answering node's view and those counts.

Which plugins a poll asks matters as much: the node asked lists only the listeners of the members it reaches, so a
read that starts after a split learns no place of the others' plugins. The URLs given for them (--prometheus-url)
are asked whatever the listeners say."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ackscope.model.snapshot import Node


def plugins_to_ask(listed: Mapping[str, str], remembered: Mapping[str, str], given: Sequence[str],
                   named: Mapping[str, str]) -> dict[str, tuple[str, bool]]:
    """Each plugin a poll reads, by URL: (the member it is as far as known, its node name or else the URL; whether
    it must answer). `listed`: {node: URL} for the members whose listeners the node asked lists (those it reaches);
    `remembered`: {node: URL} for members listed before and not now (down, or cut off from the node asked); `given`:
    one URL per member (--prometheus-url), asked instead of both; `named`: {URL: node} as each given URL's plugin
    last named its node. Only a plugin of a member the node asked reaches must answer: another's silence is no
    failed read, it is what node-down or network-partition judges."""
    if given:
        return {url: (named.get(url, url), named.get(url) in listed) for url in given}
    return {**{url: (node, False) for node, url in remembered.items()},
            **{url: (node, True) for node, url in listed.items()}}


def reconciled(nodes: tuple[Node, ...], asked: str | None, answered: Mapping[str, int | None],
               views: Mapping[str, tuple[str, ...]] | None = None) -> tuple[Node, ...]:
    """`nodes` as `asked` (the node whose API answered) lists them, corrected by `answered`: the nodes whose own
    plugin answered this poll, each with the peers it counts unreachable (None where it does not count). `views`:
    what a node the one asked lists as not running lists as not running itself, where its own API was asked."""
    views = views or {}
    names = [n.name for n in nodes]

    def cut_off(name: str) -> bool:
        # Listed as not running by the node asked, yet answering itself. Cut off only where it says so too: its own
        # view, else its plugin's count. A node resuming after a pause answers before the one asked sees it again,
        # and sees that one running: no partition, a moment of rejoining.
        if name in views:
            return asked in views[name]
        return answered[name] is None or answered[name] > 0
    unseen = [n.name for n in nodes if n.running is False and n.name in answered]
    cut = sorted(name for name in unseen if cut_off(name))
    seen = [name for name in names if name not in cut]
    out = []
    for n in nodes:
        if n.name not in answered:
            out.append(n)
            continue
        count = answered[n.name]
        cannot, inferred = n.partitions, False
        if not cannot and cut:
            if n.name == asked:
                cannot = tuple(cut)
            elif n.name in cut:
                if n.name in views:
                    cannot = tuple(x for x in views[n.name] if x in answered)
                elif count == len(names) - 1:
                    cannot = tuple(x for x in names if x != n.name)  # alone
                else:
                    cannot = tuple(seen)  # cut off from the side of the node asked
            elif n.name not in unseen and (count is None or count == len(cut)):
                cannot = tuple(cut)  # on the side of the node asked, which cannot reach them either
            inferred = cannot != n.partitions
        out.append(replace(n, running=True if n.running is False else n.running, unreachable_peers=count,
                           partitions=cannot, partitions_inferred=inferred))
    return tuple(out)


REJOIN_WITHIN = 30.0  # seconds a member not heard is taken as rejoining once it answers again


class Rejoining:
    """Members not heard (a paused or stopped node) while the node asked listed them as not running.
    Such a member that answers again while still listed so is rejoining, not cut off: resumed, it counts the node
    asked gone as that one counts it, until they reconnect (seconds, under Khepri; measured on 4.3.6 after a
    pause past net_ticktime). It stays down, not partitioned, for REJOIN_WITHIN seconds after it was last
    not heard; one still apart after that is cut off."""

    def __init__(self) -> None:
        self._silent_at: dict[str, float] = {}

    def heard(self, nodes: Sequence[Node], answered: Mapping[str, int | None], now: float
              ) -> dict[str, int | None]:
        """`answered` (as reconciled takes it) without the members rejoining at `now` (monotonic). A member
        listed not running that this poll did not hear is silent, whether its plugin was asked or a read cut short
        never reached it: a paused member hangs the node asked's own answers too (seen on 4.3.6), and a member
        answering after that is not known to be apart. One truly cut off is named REJOIN_WITHIN later, down
        until then."""
        listed_down = {n.name for n in nodes if n.running is False}
        self._silent_at.update((name, now) for name in listed_down if name not in answered)
        # Forgotten once listed running again, or once too old: a poll that read no node list (the node asked can
        # be slow to list its members while one is paused) forgets nothing.
        listed_running = {n.name for n in nodes if n.running}
        self._silent_at = {name: at for name, at in self._silent_at.items()
                           if name not in listed_running and now - at < REJOIN_WITHIN}
        return {name: count for name, count in answered.items() if name not in self._silent_at}
