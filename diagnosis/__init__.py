"""Diagnosis: rules that turn a snapshot (and the probes' statistics) into findings that name the culprit,
show the evidence and say what to do.

rules        pure functions from a Context (snapshot, previous snapshot, probe statistics, thresholds)
thresholds   the numbers they compare against ([diagnosis] in TOML)
onset        since when each finding holds, across polls
"""

# This folder is ackscope.diagnosis; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.diagnosis":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.diagnosis")
