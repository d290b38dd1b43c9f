"""Deployment files (Prometheus alert rules, the Grafana dashboard), shipped as package data so that an
installed ackscope (its demo) finds them where a source tree has them."""

# This folder is ackscope.deploy; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.deploy":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.deploy")
