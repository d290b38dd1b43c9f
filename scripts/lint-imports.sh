#!/usr/bin/env bash
# Check the architecture contracts of pyproject.toml ([tool.importlinter]) with import-linter.
# Usage: scripts/lint-imports.sh [SOURCE_TREE]   (default: this repository)
# import-linter reads the package from disk, and this repository maps its folders (model/, core/, ...) onto
# ackscope.* only at install time: so the check runs on a copy installed as a wheel installs it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
source_tree=$(cd "${1:-$repo}" && pwd)
bin="$repo/.venv/bin"
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
# From a copy without build/: setuptools keeps what it built there, and a module moved or deleted since would
# still be installed, and checked, from it.
mkdir "$tree/src"
tar -C "$source_tree" --exclude=./build --exclude=./.venv --exclude=./.git --exclude=node_modules \
  --exclude=__pycache__ -cf - . | tar -C "$tree/src" -xf -
if ! "$bin/python" -m pip install -q --no-deps --target "$tree/site" "$tree/src" >"$tree/install.log" 2>&1; then
  cat "$tree/install.log" >&2
  exit 1
fi
cd "$tree"
cp "$source_tree/pyproject.toml" .
PYTHONPATH="$tree/site" "$bin/lint-imports" --no-cache
