"""The management HTTP API as a source: a client that fetches, a normaliser that builds the Snapshot."""

from .source import ManagementSource

__all__ = ["ManagementSource"]
