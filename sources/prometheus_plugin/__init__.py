"""The broker's own Prometheus plugin: how to read it (its exposition text, each node's listener) and what its
families mean (normalise into the model). It never reads the management API: sources/plugin_source.py and
sources/management_source.py combine the two."""
