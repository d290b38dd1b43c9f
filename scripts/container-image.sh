#!/usr/bin/env bash
# Build container images with podman, nothing fetched from a registry of images (none is reachable here):
#   (default)    localhost/ackscope:<version>: the exporter's (also `probe` and `diagnose`): a Debian bookworm
#                base made by debootstrap (with Python; built once and kept under ACKSCOPE_ROOTS, imported as
#                localhost/ackscope-base:bookworm), the wheels of ackscope and its dependencies made here, and
#                deploy/container/Containerfile, in Docker's format (HEALTHCHECK is a field of that format only).
#   --dashboard  localhost/ackscope-dashboard:<version>: the same build's dashboard target, whose HEALTHCHECK is
#                the dashboard's.
#   --rabbitmq   localhost/ackscope-rabbitmq:4.0: the release matrix's Debian 13 root (RabbitMQ 4.0, made by
#                scripts/rabbitmq-roots.sh) imported as an image, for a broker in a container beside ackscope's.
# Usage: scripts/container-image.sh [--dashboard | --rabbitmq]   (as root). Works in a fresh clone: it installs
# the Debian packages it needs (podman, runc, debootstrap, binutils, python3-venv) and makes the wheels in a venv
# of its own where scripts/setup.sh made none. Prints the image's name and size; on a failure, one line naming the
# step, then the tail of its log. Debian is fetched from the mirror this machine's APT uses, or
# ACKSCOPE_DEBIAN_MIRROR (scripts/debian-mirror.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/debian-mirror.sh"
case "${1:-}" in
  "") target=exporter image_name=ackscope package=ackscope ;;
  --dashboard) target=dashboard image_name=ackscope-dashboard package='ackscope[dashboard]' ;;
  --rabbitmq) target= ;;
  *) echo "container-image: unknown option ${1} (usage: scripts/container-image.sh [--dashboard | --rabbitmq])" >&2
     exit 2 ;;
esac
# What the build needs, asked for before anything runs: without podman, debootstrap would run for a minute first.
need=()
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
command -v strip >/dev/null || need+=(binutils)
python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
if [ "$(id -u)" -ne 0 ]; then
  echo "container-image: run it as root (podman builds as root here${need:+; it also needs ${need[*]}})" >&2
  exit 1
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "container-image: installing ${need[*]} ..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 \
    || { echo "container-image: apt-get install ${need[*]} failed: install them, then run this again" >&2; exit 1; }
fi
roots=${ACKSCOPE_ROOTS:-/var/cache/ackscope/roots}
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

if [ -z "$target" ]; then
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
    mirror=$(debian_mirror container-image) || exit 1
    rm -rf "$root"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" "$mirror" \
      >>"$log" 2>&1 || fail "debootstrap of the image's base from $mirror"
    # What an image keeps of apt: nothing. Its lists and packages are for a machine that installs later; nor
    # the documentation, manual pages and translations nobody reads in a container.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/cache/debconf/*-old \
      "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* \
      "$root"/usr/lib/*-linux-gnu/gconv
    touch "$root/.ackscope-ready"
  fi
  import_root "$root" "$base"
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$here/pyproject.toml" | head -n 1)
image=localhost/$image_name:$version
context=$(mktemp -d) build_venv=$(mktemp -d)
trap 'rm -rf "$context" "$build_venv"' EXIT
# The project's wheel and its dependencies' (the dashboard extra for the dashboard's image; never the pipeline
# extra), made from the source tree here, by the project's venv, or in a fresh clone by one made for this build.
python=$here/.venv/bin/python
if [ ! -x "$python" ]; then
  python3 -m venv "$build_venv" >>"$log" 2>&1 || fail "python3 -m venv (for the wheels)"
  python=$build_venv/bin/python
fi
"$python" -m pip wheel --quiet --wheel-dir "$context/wheels" "$here${package#ackscope}" >>"$log" 2>&1 \
  || fail "pip wheel of ackscope and its dependencies"
# pyarrow's wheel without what no command loads (deploy/container/slim-pyarrow.sh): 170 MB installed otherwise.
"$python" -m pip install --quiet wheel >>"$log" 2>&1 || fail "pip install wheel (to slim pyarrow's wheel)"
bash "$here/deploy/container/slim-pyarrow.sh" "$python" "$context"/wheels/pyarrow-*.whl >>"$log" 2>&1 \
  || fail "slimming pyarrow's wheel"
digest=$(cd "$context/wheels" && sha256sum -- * | sha256sum | cut -c1-16)
"${podman[@]}" build --format docker --file "$here/deploy/container/Containerfile" --target "$target" \
  --build-arg "BASE=$base" --build-arg "PACKAGE=$package" --build-arg "WHEELS_DIGEST=$digest" --tag "$image" "$context" >>"$log" 2>&1 \
  || fail "podman build of $image"
# The image this build replaced, untagged now: not kept.
"${podman[@]}" image prune --force >>"$log" 2>&1 || true
echo "container-image: $image ($(size "$image") MiB)"
