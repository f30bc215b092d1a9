#!/usr/bin/env bash
# Local stand-ins for the public base images deploy/Dockerfile builds from, for machines where no
# registry serves them (CI's have no route to Docker Hub). Each is made only when no image of
# that name is there yet, so a machine builds them once; `make image` calls this first.
#
#   deploy/bases.sh buildah|docker
#
# The names are the Dockerfile's own defaults (ARG PYTHON_IMAGE, ARG RUST_IMAGE), so the
# Dockerfile that users build against the public images is the one built here, unchanged:
#
# - python:3.11-slim-bookworm: Debian bookworm (mmdebstrap, minbase) with Debian's Python 3.11,
#   its venv module, ca-certificates, netbase and tzdata, as the public image has them, and
#   python3.11 / python3 / python linked in /usr/local/bin where the public image has its own.
#   The machine's local certificate authorities (/usr/local/share/ca-certificates) are added,
#   so that pip and cargo inside the build trust what the host trusts (an egress proxy's CA).
# - rust:1.95-slim-bookworm: that image plus a Rust toolchain at the public image's paths
#   (RUSTUP_HOME=/usr/local/rustup, CARGO_HOME=/usr/local/cargo); the Dockerfile copies only
#   those two directories out of it. The toolchain is the host's rustup toolchain, copied
#   without its documentation: rustup's servers are out of reach here, bookworm's rustc (1.63)
#   is too old for native/Cargo.lock, and Debian unstable's rustc, although recent, is built
#   against unstable's libc and libraries, which bookworm's cannot satisfy. rustup's official
#   builds need only glibc 2.17, so the host's toolchain runs on bookworm as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "bases: $*" >&2
  exit 1
}

engine="${1:-}"
case "$engine" in
  buildah | docker) ;;
  *) die "usage: deploy/bases.sh buildah|docker" ;;
esac

python_image="$(sed -n 's/^ARG PYTHON_IMAGE=//p' deploy/Dockerfile)"
rust_image="$(sed -n 's/^ARG RUST_IMAGE=//p' deploy/Dockerfile)"
[ -n "$python_image" ] && [ -n "$rust_image" ] ||
  die "deploy/Dockerfile has no ARG PYTHON_IMAGE=... or ARG RUST_IMAGE=... default"

have() {
  if [ "$engine" = buildah ]; then
    buildah inspect --type image "$1" >/dev/null 2>&1
  else
    docker image inspect "$1" >/dev/null 2>&1
  fi
}

work="$(mktemp -d /var/tmp/sidecar-bases.XXXXXX)"
ctr=""
cleanup() {
  if [ -n "$ctr" ]; then buildah rm "$ctr" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# ---- python:3.11-slim-bookworm -------------------------------------------------------------
if have "$python_image"; then
  echo "bases: $python_image is there"
else
  command -v mmdebstrap >/dev/null 2>&1 ||
    die "mmdebstrap is needed to make $python_image (apt-get install mmdebstrap)"
  echo "bases: making $python_image with mmdebstrap (Debian bookworm, Python 3.11)"
  hooks=(
    # python3.11, python3 and python where the public image has them (its own build's path)
    --customize-hook='for n in python3.11 python3 python; do ln -sf /usr/bin/python3.11 "$1/usr/local/bin/$n"; done'
  )
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    hooks+=(--customize-hook='cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/" && chroot "$1" update-ca-certificates >/dev/null')
  fi
  # Documentation, man pages and translations are left out, as in Debian's slim images.
  mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
    --include=python3.11,python3,python3.11-venv,ca-certificates,netbase,tzdata \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    "${hooks[@]}" \
    bookworm "$work/rootfs.tar" http://deb.debian.org/debian
  env=(PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
  if [ "$engine" = buildah ]; then
    ctr="$(buildah from --pull-never scratch)"
    buildah add --quiet "$ctr" "$work/rootfs.tar" / >/dev/null
    buildah config --env "${env[0]}" --env "${env[1]}" --cmd python3 "$ctr"
    buildah commit --quiet --rm "$ctr" "$python_image" >/dev/null
    ctr=""
  else
    docker import --change "ENV ${env[0]}" --change "ENV ${env[1]}" --change 'CMD ["python3"]' \
      "$work/rootfs.tar" "$python_image" >/dev/null
  fi
  rm -f "$work/rootfs.tar"
  echo "bases: $python_image made"
fi

# ---- rust:1.95-slim-bookworm ---------------------------------------------------------------
if have "$rust_image"; then
  echo "bases: $rust_image is there"
else
  wanted="$(echo "$rust_image" | sed -n 's/^rust:\([0-9][0-9.]*\)-.*/\1/p')"
  [ -n "$wanted" ] || die "cannot read a Rust version from $rust_image"
  command -v rustc >/dev/null 2>&1 || die "no rustc on PATH: $rust_image is made from the host's rustup toolchain"
  sysroot="$(rustc --print sysroot)"
  [ -x "$sysroot/bin/cargo" ] && [ "$sysroot" != /usr ] ||
    die "rustc on PATH ($sysroot) is not a rustup toolchain with cargo; $rust_image is made from one"
  version="$("$sysroot/bin/rustc" --version | awk '{print $2}')"
  case "$version" in
    "$wanted" | "$wanted".*) ;;
    *) die "the host's toolchain is rustc $version, $rust_image needs $wanted (change ARG RUST_IMAGE or the host's toolchain)" ;;
  esac
  echo "bases: making $rust_image from the host's rustc $version ($sysroot)"
  toolchain="$version-x86_64-unknown-linux-gnu"
  mkdir -p "$work/usr/local/rustup/toolchains/$toolchain" "$work/usr/local/cargo/bin"
  tar -C "$sysroot" --exclude=./share/doc -cf - . |
    tar -C "$work/usr/local/rustup/toolchains/$toolchain" -xf -
  # The public image's CARGO_HOME/bin holds rustup's proxies; links to the toolchain do the
  # same job without rustup.
  for tool in "$work/usr/local/rustup/toolchains/$toolchain/bin/"*; do
    ln -s "/usr/local/rustup/toolchains/$toolchain/bin/$(basename "$tool")" "$work/usr/local/cargo/bin/"
  done
  env=(RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo
    PATH=/usr/local/cargo/bin:/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin)
  if [ "$engine" = buildah ]; then
    ctr="$(buildah from --pull-never "$python_image")"
    buildah copy --quiet "$ctr" "$work/usr/local" /usr/local >/dev/null
    buildah config --env "${env[0]}" --env "${env[1]}" --env "${env[2]}" --cmd bash "$ctr"
    buildah commit --quiet --rm "$ctr" "$rust_image" >/dev/null
    ctr=""
  else
    printf 'FROM %s\nCOPY usr/local /usr/local\nENV %s %s %s\nCMD ["bash"]\n' \
      "$python_image" "${env[@]}" >"$work/Dockerfile"
    docker build --pull=false -q -t "$rust_image" "$work" >/dev/null
  fi
  echo "bases: $rust_image made"
fi
