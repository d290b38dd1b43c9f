#!/usr/bin/env bash
# Build container images with podman, nothing fetched from a registry of images (none is reachable here):
#   (default)   localhost/ackscope:<version>: a Debian bookworm base made by debootstrap (with Python; built once
#               and kept under ACKSCOPE_ROOTS, imported as localhost/ackscope-base:bookworm), the wheels of
#               ackscope and its dependencies made here, and deploy/container/Containerfile, in Docker's format
#               (HEALTHCHECK is a field of that format only).
#   --rabbitmq  localhost/ackscope-rabbitmq:4.0: the release matrix's Debian 13 root (RabbitMQ 4.0, made by
#               scripts/rabbitmq-roots.sh) imported as an image, for a broker in a container beside ackscope's.
# Usage: scripts/container-image.sh [--rabbitmq]   (as root). Prints the image's name and size; on a failure,
# one line naming the step, then the tail of its log.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
roots=${ACKSCOPE_ROOTS:-/var/cache/ackscope/roots}
mirror=${ACKSCOPE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
podman=("$here/scripts/podman.sh")
mkdir -p "$roots"
log=$roots/container-image.log
: > "$log"

fail() {  # fail "step": the one line, then what the step printed last
  echo "container-image: $1 failed; the end of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
}

size() {  # the image's size in MiB, as podman counts it (its layers, uncompressed)
  echo $(( $("${podman[@]}" image inspect --format '{{.Size}}' "$1") / 1048576 ))
}

import_root() {  # import_root DIR IMAGE [--change ...]: a root directory as a single-layer image
  local dir=$1 image=$2; shift 2
  # Not what a node started from the same root has bound into it (/proc, /sys, /dev: other file systems) nor the
  # data of nodes running from it now (under tmp/): the suite's release tests run beside this build.
  tar --numeric-owner --one-file-system --exclude='./tmp/*' -C "$dir" -c . \
    | "${podman[@]}" import "$@" - "$image" >>"$log" 2>&1 \
    || fail "podman import of $dir"
}

if [ "${1:-}" = "--rabbitmq" ]; then
  image=localhost/ackscope-rabbitmq:4.0
  if ! "${podman[@]}" image exists "$image"; then
    bash "$here/scripts/rabbitmq-roots.sh" trixie >>"$log" 2>&1 || fail "the Debian 13 RabbitMQ root"
    import_root "$roots/trixie" "$image" --change 'USER rabbitmq' \
      --change 'ENV HOME=/var/lib/rabbitmq' --change 'CMD ["/usr/lib/rabbitmq/bin/rabbitmq-server"]'
  fi
  echo "container-image: $image ($(size "$image") MiB)"
  exit 0
fi

base=localhost/ackscope-base:bookworm
if ! "${podman[@]}" image exists "$base"; then
  root=$roots/image-bookworm
  if [ ! -f "$root/.ackscope-ready" ]; then
    rm -rf "$root"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" "$mirror" \
      >>"$log" 2>&1 || fail "debootstrap of the image's base from $mirror"
    # What an image keeps of apt: nothing. Its lists and packages are for a machine that installs later.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    touch "$root/.ackscope-ready"
  fi
  import_root "$root" "$base"
fi

version=$("$here/.venv/bin/python" -c 'import ackscope; print(ackscope.__version__)')
image=localhost/ackscope:$version
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
# The project's wheel and its dependencies' (without the pipeline extra), made from the source tree here.
"$here/.venv/bin/python" -m pip wheel --quiet --wheel-dir "$context/wheels" "$here" >>"$log" 2>&1 \
  || fail "pip wheel of ackscope and its dependencies"
digest=$(cd "$context/wheels" && sha256sum -- * | sha256sum | cut -c1-16)
"${podman[@]}" build --format docker --file "$here/deploy/container/Containerfile" --build-arg "BASE=$base" \
  --build-arg "WHEELS_DIGEST=$digest" --tag "$image" "$context" >>"$log" 2>&1 || fail "podman build of $image"
# The image this build replaced, untagged now: not kept.
"${podman[@]}" image prune --force >>"$log" 2>&1 || true
echo "container-image: $image ($(size "$image") MiB)"
