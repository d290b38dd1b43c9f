#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: install what it needs, then pytest against real services.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
set +e
# The 30 slowest tests listed at the end: where the suite's time goes, to keep it within CI's budget.
.venv/bin/python -m pytest --durations=30 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure, not a pass" >&2
  exit 1
fi
exit "$status"
