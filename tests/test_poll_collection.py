"""A poll runs with the garbage collector's automatic collections off (a full one, walking a large broker's
objects, held the GIL 10-170 ms while scrapes waited) and always turns them back on, however the read ends."""

from __future__ import annotations

import gc

import pytest
from snapshot_builders import snapshot

from ackscope.exporter.poller import Poller
from ackscope.model.source import FetchError, SourceFailed


class Reader:
    """A source whose read notes whether automatic collection was on, then answers `outcome`."""

    name = "test"
    base_url = "http://broker.test"

    def __init__(self, outcome):
        self.outcome = outcome
        self.collector_on_during_read: bool | None = None

    def read(self):
        self.collector_on_during_read = gc.isenabled()
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def close(self):
        pass


@pytest.mark.parametrize("outcome", [snapshot(), SourceFailed([FetchError("overview", "connection", "refused")]),
                                     RuntimeError("a bug in a normaliser")],
                         ids=["read", "broker down", "unexpected error"])
def test_a_poll_reads_with_automatic_collection_off_and_turns_it_back_on(outcome):
    assert gc.isenabled()
    reader = Reader(outcome)
    poller = Poller(reader, interval=10)
    try:
        poller.poll_once()
    except RuntimeError:
        pass
    assert reader.collector_on_during_read is False
    assert gc.isenabled()
    gc.unfreeze()  # what the poll froze, back in the collector's sight for the rest of the suite
