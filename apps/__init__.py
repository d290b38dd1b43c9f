"""The applications: each `ackscope` subcommand assembles the parts below it (sources, probes, diagnosis,
the exporter's collectors, pipeline, dashboard, workloads) over the core and the model. Only here may parts
meet; import-linter's contracts (pyproject.toml) hold the rest apart."""
