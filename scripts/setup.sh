#!/usr/bin/env bash
# Prepare this machine for ackscope: Debian packages (as root) and the project's venv in .venv.
# Usage: scripts/setup.sh [--test]   (--test adds what the test suite needs)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
# The Spark pipeline (PySpark 4) runs on a Java 17+ runtime.
command -v java >/dev/null || [ -x "${JAVA_HOME:-/nonexistent}/bin/java" ] || need+=(openjdk-17-jre-headless)
if [ "${1:-}" = "--test" ]; then
  command -v promtool >/dev/null && command -v prometheus >/dev/null || need+=(prometheus)
  # The dashboard's real-browser test drives Debian's chromium (never a browser download).
  [ -x /usr/bin/chromium ] || need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # A policy-rc.d keeps apt from starting the packages' own services (ackscope starts its own nodes);
  # one made here is removed again, one the machine had is left alone.
  made_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
  fi
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
  [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
fi

python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if [ "${1:-}" = "--test" ]; then
  .venv/bin/python -m pip install -q -e '.[test]'
else
  .venv/bin/python -m pip install -q -e .
fi
