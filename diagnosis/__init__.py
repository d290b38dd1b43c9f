"""Diagnosis: rules that turn a snapshot (and the probes' statistics) into findings that name the culprit,
show the evidence and say what to do.

rules        pure functions from a Context (snapshot, previous snapshot, probe statistics, thresholds)
thresholds   the numbers they compare against ([diagnosis] in TOML)
onset        since when each finding holds, across polls
"""
