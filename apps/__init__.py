"""The applications: each `ackscope` subcommand assembles the parts below it (sources, probes, diagnosis,
the exporter's collectors, pipeline, dashboard, workloads) over the core and the model. Only here may parts
meet; import-linter's contracts (pyproject.toml) hold the rest apart."""

# This folder is ackscope.apps; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.apps":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.apps")
