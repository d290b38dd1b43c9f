"""ackscope's own health: is the last poll good, how long it took, what failed, what was folded."""

from __future__ import annotations

import platform

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from ackscope import __version__

from ..cardinality import Shaped
from ..status import PollStatus


class SelfCollector:
    def __init__(self, status: PollStatus, shaped: Shaped | None):
        self._status = status
        self._shaped = shaped

    def collect(self):
        status = self._status
        yield GaugeMetricFamily("ackscope_up", "1 when the last poll read the broker; a partial read (an endpoint "
                                "failed, the rest exported) counts, and ackscope_poll_errors_total says what "
                                "failed.", value=int(status.up))
        duration = GaugeMetricFamily("ackscope_poll_duration_seconds", "Duration of the last complete poll.")
        if status.last_duration is not None:
            duration.add_metric([], status.last_duration)
        yield duration
        errors = CounterMetricFamily("ackscope_poll_errors", "Failed reads of the broker, by endpoint and "
                                     "reason.", labels=("endpoint", "reason"))
        for (endpoint, reason), count in sorted(status.errors.items()):
            errors.add_metric([endpoint, reason], count)
        yield errors
        source = InfoMetricFamily("ackscope_source", "Where the last good poll read the broker: the management "
                                  "API (management), its Prometheus plugin (prometheus), or on a large broker the "
                                  "plugin for the queues and the management API for the rest "
                                  "(management+prometheus).", labels=())
        if status.source is not None:
            source.add_metric([], {"source": status.source})
        yield source
        yield InfoMetricFamily("ackscope_build", "ackscope's version.",
                               value={"version": __version__, "python_version": platform.python_version()})
        folded = GaugeMetricFamily("ackscope_folded_objects", "Objects without series of their own, counted "
                                   "in their vhost's '(folded)' totals (see --max-queues, --max-channels).",
                                   labels=("kind", "vhost"))
        if self._shaped is not None:
            for kind, groups in (("queue", self._shaped.folded_queues), ("channel", self._shaped.folded_channels),
                                 ("consumer", self._shaped.folded_consumers)):
                for f in groups:
                    folded.add_metric([kind, f.vhost], f.count)
        yield folded
