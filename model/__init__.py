"""The broker model: immutable records every part shares and nothing of ackscope's own below them.

snapshot   the broker's state at one poll (what every source produces)
events     what happened between polls: the broker closing a channel or connection, timing out a consumer
source     what a source promises: a Snapshot, or SourceFailed naming each endpoint that failed
findings   a rule's verdict on one object
probes     the probes' statistics at one moment
schemas    the Parquet contracts: probe events, snapshot history, the pipeline's reports
"""

# This folder is ackscope.model; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.model":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.model")
