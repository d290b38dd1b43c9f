"""The management HTTP API: how to ask it (client: columns, pagination, one deadline) and what its answers mean
(normalise into the model, field by field; AMQP 1.0 sessions and the stream plugin's lists). It never reads the
Prometheus plugin: sources/management_source.py and sources/plugin_source.py combine the two."""
