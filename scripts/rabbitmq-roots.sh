#!/usr/bin/env bash
# Build the Debian roots that the suite's RabbitMQ 4 nodes run from: Debian 13's RabbitMQ 4.0 (trixie) and the
# newest 4.x Debian packages (sid), each with its own Erlang. Built once and cached outside the repository
# (ACKSCOPE_ROOTS, /var/cache/ackscope/roots by default); a root whose RabbitMQ answers is kept as it is. Fetched
# from the Debian mirror this machine's APT uses, or ACKSCOPE_DEBIAN_MIRROR (scripts/debian-mirror.sh).
# Usage: scripts/rabbitmq-roots.sh [suite...]   (default: trixie sid). As root.
# One line per root when all goes well; on a failure, one line naming the step, then the tail of its log.
set -euo pipefail
roots=${ACKSCOPE_ROOTS:-/var/cache/ackscope/roots}
source "$(dirname "$0")/debian-mirror.sh"
mirror=  # looked up when a root is to be built: built roots need none
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(trixie sid)
mkdir -p "$roots"

fail() {  # fail "step" log: the one line, then what the step printed last
  echo "rabbitmq-roots: $1 failed; the end of $2:" >&2
  tail -n 20 "$2" >&2
  exit 1
}

for suite in "${suites[@]}"; do
  root=$roots/$suite
  log=$roots/$suite.log
  if [ -x "$root/usr/lib/rabbitmq/bin/rabbitmq-server" ] && [ -f "$root/.ackscope-ready" ]; then
    echo "rabbitmq-roots: $suite root ready at $root (RabbitMQ $(cat "$root/.ackscope-ready"))"
    continue
  fi
  [ -n "$mirror" ] || mirror=$(debian_mirror rabbitmq-roots) || exit 1
  : > "$log"
  command -v debootstrap >/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >>"$log" 2>&1 \
      || fail "installing debootstrap" "$log"
  }
  rm -rf "$root"
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >>"$log" 2>&1 \
    || fail "debootstrap of Debian $suite from $mirror" "$log"
  # epmd in the root resolves localhost through the root's own /etc/hosts.
  cp /etc/hosts "$root/etc/hosts"
  # A policy-rc.d keeps the package from starting its own node inside the root.
  printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
  # sid's Release file may be past its Valid-Until date between pushes.
  chroot "$root" apt-get -o Acquire::Check-Valid-Until=false update -qq >>"$log" 2>&1 \
    || fail "apt-get update in the $suite root" "$log"
  DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -qq --no-install-recommends rabbitmq-server \
    >>"$log" 2>&1 || fail "installing rabbitmq-server in the $suite root" "$log"
  version=$(chroot "$root" dpkg-query -W -f '${Version}' rabbitmq-server)
  chroot "$root" apt-get clean >>"$log" 2>&1 || true
  echo "$version" > "$root/.ackscope-ready"
  echo "rabbitmq-roots: $suite root built at $root (RabbitMQ $version)"
done
