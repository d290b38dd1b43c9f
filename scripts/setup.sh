#!/usr/bin/env bash
# Prepare this machine for ackscope: Debian packages (as root) and the project's venv in .venv.
# Usage: scripts/setup.sh [--test]   (--test adds what the test suite needs)
# Quiet when all goes well (one line per step); on a failure, the tail of the step's log.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .venv
log=.venv/setup.log
: > "$log"

step() {  # step "what" command...: run it with its output in the log; say what failed, with the log's tail
  local what=$1; shift
  if ! "$@" >>"$log" 2>&1; then
    echo "setup: $what failed; the end of $log:" >&2
    tail -n 25 "$log" >&2
    exit 1
  fi
}

need=()
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
# The Spark pipeline (PySpark 4) runs on a Java 17+ runtime.
command -v java >/dev/null || [ -x "${JAVA_HOME:-/nonexistent}/bin/java" ] || need+=(openjdk-17-jre-headless)
if [ "${1:-}" = "--test" ]; then
  command -v promtool >/dev/null && command -v prometheus >/dev/null || need+=(prometheus)
  # The dashboard's real-browser test drives Debian's chromium (never a browser download).
  [ -x /usr/bin/chromium ] || need+=(chromium)
  # The probes' wire test captures their AMQP connection with tshark (as root: no setuid dumpcap needed).
  command -v tshark >/dev/null || need+=(tshark)
  # Real clients the rules are proven on: the librabbitmq-c tools, the Java client (run from source, so a
  # JDK), Node for amqplib (tests/clients/node, from npm below).
  command -v amqp-consume >/dev/null || need+=(amqp-tools)
  [ -f /usr/share/java/amqp-client.jar ] || need+=(librabbitmq-client-java)
  command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)
  command -v npm >/dev/null || need+=(nodejs npm)
  # The soak's packet loss: nftables in a network namespace (this kernel has no netem), made with iproute2.
  command -v nft >/dev/null || need+=(nftables)
  command -v ip >/dev/null || need+=(iproute2)
  # Qpid Proton's Python binding (an AMQP 1.0 client of the suite) has no wheel for this Python: pip builds it.
  command -v gcc >/dev/null || need+=(gcc)
  python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' \
    || need+=(python3-dev)
  # The release matrix's RabbitMQ 4 nodes run from Debian roots that debootstrap makes (below); the container
  # image's base too, built and run by podman with runc (scripts/podman.sh says why not crun).
  command -v debootstrap >/dev/null || need+=(debootstrap)
  command -v podman >/dev/null || need+=(podman)
  command -v runc >/dev/null || need+=(runc)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]} ..."
  export DEBIAN_FRONTEND=noninteractive
  # wireshark-common asks whether non-root users may capture; the answer is no, and must not be asked.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  # A policy-rc.d keeps apt from starting the packages' own services (ackscope starts its own nodes);
  # one made here is removed again, one the machine had is left alone.
  made_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
  fi
  step "apt-get update" apt-get update -qq
  step "apt-get install ${need[*]}" apt-get install -y -qq "${need[@]}"
  [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
fi

python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
[ -x .venv/bin/python ] || step "creating .venv" "$python" -m venv .venv
step "upgrading pip" .venv/bin/python -m pip install -q --upgrade pip
# Editable, so that a change to a module is what the next run sees (tests/test_architecture.py proves the wheel).
# Strict: a link tree under build/ laid out as the package is, which `lint-imports` reads from the repository's
# root (the folders become ackscope.* only at install; a new module needs this script run again).
strict=(--config-settings editable_mode=strict)
if [ "${1:-}" = "--test" ]; then
  step "installing ackscope with its test dependencies" .venv/bin/python -m pip install -q "${strict[@]}" -e '.[test]'
else
  step "installing ackscope" .venv/bin/python -m pip install -q "${strict[@]}" -e '.[pipeline,dashboard]'
fi
if [ "${1:-}" = "--test" ]; then
  # What only the tests and bench/ use: a distribution of its own, so that neither the wheel nor the image has it.
  step "installing the test kit (testkit/)" .venv/bin/python -m pip install -q --no-deps -e testkit
  step "installing amqplib from npm (tests/clients/node)" npm ci --prefix tests/clients/node --no-audit --no-fund
  # RabbitMQ 4.0 (Debian 13) and the newest 4.x (Debian unstable), each in a root of its own, built once and
  # cached outside the repository: the suite's release matrix. It says itself which step failed.
  bash scripts/rabbitmq-roots.sh
fi
echo "setup: ackscope $(.venv/bin/python -c 'import ackscope; print(ackscope.__version__)') is installed in .venv"
