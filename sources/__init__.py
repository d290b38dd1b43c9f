"""Sources: where the broker model's snapshots come from. Each reads the broker (I/O at the edge) and
hands its answers to pure functions that normalise them into ackscope.model's records.

management         the management HTTP API (/api/...), read-only, with columns= and pagination
prometheus_plugin  the broker's Prometheus plugin (/metrics/detailed), where management statistics are off
choice             --source auto|management|prometheus
"""

# This folder is ackscope.sources; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.sources":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.sources")

from .choice import KINDS, make_source
from .management import ManagementSource
from .prometheus_plugin import PrometheusPluginSource
from .selection import Selection

__all__ = ["KINDS", "ManagementSource", "PrometheusPluginSource", "Selection",
           "make_source"]
