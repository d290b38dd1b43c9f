#!/usr/bin/env bash
# podman as ackscope's scripts and tests run it on the machines it is developed on: crun, podman's default
# runtime, refuses to start containers there ("cgroups in hybrid mode not supported"), runc with cgroupfs
# runs them, and setrlimit is refused (deploy/container/containers.conf sets no default ulimits).
# Usage: scripts/podman.sh ARGS...   (podman's own arguments; as root)
here=$(cd "$(dirname "$0")/.." && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/deploy/container/containers.conf}
exec podman --runtime runc --cgroup-manager=cgroupfs "$@"
