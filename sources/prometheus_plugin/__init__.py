"""The broker's own Prometheus plugin as a source, where management statistics are off."""

from .source import PrometheusPluginSource

__all__ = ["PrometheusPluginSource"]
