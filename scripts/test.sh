#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: install what it needs, check the architecture contracts, then run
# pytest against real services in two phases: every test on parallel workers (most of them wait on a broker, not
# on the CPU), then the tests marked `alone` (timing assertions) with nothing competing with them.
# Arguments go to pytest in both phases (a path, -k, -x ...). ACKSCOPE_TEST_WORKERS sets the workers (4).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
bash scripts/setup.sh --test
bash scripts/lint-imports.sh  # the contracts in pyproject.toml, on a copy installed as a wheel installs it
set_up=$(date +%s)
# Each phase's JUnit report stays in test-artifacts/ (ignored by git): every test's time, for the budget.
results=test-artifacts
mkdir -p "$results"
rm -f "$results/parallel.xml" "$results/alone.xml"
set +e
# The 30 slowest tests listed after each phase: where the suite's time goes, to keep it within CI's budget.
.venv/bin/pytest -n "${ACKSCOPE_TEST_WORKERS:-4}" --dist loadgroup --no-loadscope-reorder -m "not alone" --durations=30 \
  --junitxml="$results/parallel.xml" "$@"
parallel=$?
.venv/bin/pytest -n 0 -m alone --durations=30 --junitxml="$results/alone.xml" "$@"
alone=$?
set -e
.venv/bin/python scripts/suite_summary.py --setup-s $((set_up - started)) --total-s $(($(date +%s) - started)) \
  "$results/parallel.xml" "$results/alone.xml"
# pytest's 5 is "collected nothing": fine for one phase (a path may hold no `alone` test), a failure for both.
if [ "$parallel" -eq 5 ] && [ "$alone" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure, not a pass" >&2
  exit 1
fi
for status in "$parallel" "$alone"; do
  [ "$status" -eq 0 ] || [ "$status" -eq 5 ] || exit "$status"
done
