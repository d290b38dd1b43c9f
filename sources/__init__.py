"""Sources: where the broker model's snapshots come from. Each reads the broker (I/O at the edge) and
hands its answers to pure functions that normalise them into ackscope.model's records.

management   the management HTTP API (/api/...), read-only, with columns= and pagination
"""

from .management import ManagementSource
from .selection import Selection

__all__ = ["ManagementSource", "Selection"]
