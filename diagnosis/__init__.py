"""Diagnosis: rules that turn a snapshot (and the probes' statistics) into findings that name the culprit,
show the evidence and say what to do."""
