"""Sources: where the broker model's snapshots come from. Each reads the broker (I/O at the edge) and
hands its answers to pure functions that normalise them into ackscope.model's records.

management         the management HTTP API (/api/...): its client and what its answers mean
prometheus_plugin  the broker's Prometheus plugin (/metrics, /metrics/detailed): its reader and what it means
management_source  statistics on: the API's lists, and each node's plugin for what only it counts
plugin_source      statistics off (or a large broker): the plugin's counts, and the API's statistics-free lists
choice             --source auto|management|prometheus: which of the two reads, poll by poll; and what is read
                   beside the polls (refresh): the node's settings, the facts an upgrade depends on
broker_log         the node's log: what happened between polls (channels and connections the broker closed,
                   consumers it timed out), as ackscope.model.events' records
break_ledger       those events held beside the snapshots: attributed to clients, the window's kept, all counted
event_exchange     the broker's event exchange (--event-exchange): connections and channels opened and closed
"""

# This folder is ackscope.sources; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.sources":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.sources")

from .break_ledger import BreakLedger
from .broker_log.watch import BrokerLogWatch
from .choice import KINDS, make_source
from .event_exchange.watch import EventExchangeWatch
from .management_source import ManagementSource
from .plugin_source import PrometheusPluginSource
from .selection import Selection

__all__ = ["KINDS", "BreakLedger", "BrokerLogWatch", "EventExchangeWatch", "ManagementSource",
           "PrometheusPluginSource", "Selection", "make_source"]
