"""Where the management API lists the channels, the plugin's per-channel counts of the vhosts at risk say which
queues a publisher reached (sources/routing.py): tied by the publish count both read, from small inputs and from
an answer recorded from a real node. Live, beside Celery on every release: tests/test_versions.py."""

from __future__ import annotations

from snapshot_builders import STATS_OFF, channel, snapshot, stats

from ackscope.sources import routing
from ackscope.sources.prometheus_plugin import normalise as plugin
from ackscope.sources.prometheus_plugin.normalise import ChannelRoutes


def _publisher(name: str, published: int, confirm: bool = False):
    return channel(name, confirm=confirm, message_stats=stats(publish=published))


def test_the_recorded_answer_gives_each_channels_publishes_and_the_queues_they_reached():
    samples = plugin.parse((STATS_OFF / "detailed.prom").read_text(), "routed", plugin.ROUTE_SAMPLES)
    routes = {r.channel: r for r in plugin.channel_routes(samples)}
    assert routes["<0.813.0>"] == ChannelRoutes("<0.813.0>", "/", 60, ("audit", "invoices"))
    assert routes["<0.823.0>"] == ChannelRoutes("<0.823.0>", "/", 5, ("invoices",))
    assert routes["<0.838.0>"].queues == ()  # published into amq.direct, bound to nothing: routed nowhere


def test_a_publisher_is_tied_to_the_one_plugin_channel_whose_count_is_its_own_or_a_refresh_ahead():
    s = snapshot(channels=[_publisher("celery producer", 41), _publisher("ledger", 900),
                           _publisher("confirming", 300, confirm=True)])
    routes = [ChannelRoutes("<0.1.0>", "/", 42, ("celery",)),  # one publish ahead of the API's refresh
              ChannelRoutes("<0.2.0>", "/", 930, ("ledger",)),
              ChannelRoutes("<0.3.0>", "/", 300, ("events",)),
              ChannelRoutes("<0.4.0>", "other", 41, ("elsewhere",))]  # another vhost's
    tied = {ch.name: ch for ch in routing.attribute(s, routes).channels}
    assert tied["celery producer"].routed_into == ("celery",)
    assert tied["celery producer"].routed_match.startswith("inferred: the Prometheus plugin's channel <0.1.0>, the "
                                                           "only one of vhost / whose publishes (42)")
    assert tied["ledger"].routed_into == ("ledger",)  # 30 ahead of 900: within a twentieth
    assert tied["confirming"].routed_into is None  # publishes with confirms: nothing at stake to tell


def test_where_the_counts_cannot_tell_two_publishers_apart_neither_is_tied():
    s = snapshot(channels=[_publisher("a", 50), _publisher("b", 51), _publisher("c", 500)])
    routes = [ChannelRoutes("<0.1.0>", "/", 51, ("orders",)), ChannelRoutes("<0.2.0>", "/", 700, ("ledger",))]
    tied = {ch.name: ch.routed_into for ch in routing.attribute(s, routes).channels}
    assert tied == {"a": None, "b": None, "c": None}  # a and b could both be <0.1.0>; c is none of them
    assert routing.attribute(s, []) is s
