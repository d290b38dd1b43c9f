"""Deployment files (Prometheus alert rules, the Grafana dashboard), shipped as package data so that an
installed ackscope (its demo) finds them where a source tree has them."""
