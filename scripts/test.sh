#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: install what it needs, then pytest against real services.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure, not a pass" >&2
  exit 1
fi
exit "$status"
