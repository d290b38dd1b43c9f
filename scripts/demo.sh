#!/usr/bin/env bash
# Start a private RabbitMQ node and the ackscope exporter against it; Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/ackscope demo "$@"
