"""Sources: where the broker model's snapshots come from. Each reads the broker (I/O at the edge) and
hands its answers to pure functions that normalise them into ackscope.model's records.

management         the management HTTP API (/api/...), read-only, with columns= and pagination
prometheus_plugin  the broker's Prometheus plugin (/metrics/detailed), where management statistics are off
choice             --source auto|management|prometheus
"""

from .choice import KINDS, make_source
from .management import ManagementSource
from .prometheus_plugin import PrometheusPluginSource
from .selection import Selection

__all__ = ["KINDS", "ManagementSource", "PrometheusPluginSource", "Selection",
           "make_source"]
