#!/usr/bin/env bash
# `make image`: builds deploy/Dockerfile's runtime stage as sidecar:VERSION and its demo stage as
# sidecar-demo:VERSION, with docker where a docker daemon answers and with buildah otherwise
# (`buildah bud --isolation chroot`, which needs no container runtime), after deploy/bases.sh has
# made the base images where no registry serves them. Writes the images as OCI archives,
# out/sidecar-image.tar and out/sidecar-demo-image.tar, and prints their sizes: the whole image
# and what it adds above its base image.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "image: $*" >&2
  exit 1
}

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  engine=docker
elif command -v buildah >/dev/null 2>&1; then
  engine=buildah
else
  die "neither a running docker nor buildah found; install one (apt-get install buildah)"
fi

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)"
[ -n "$version" ] || die "no version in pyproject.toml"
image="sidecar:$version"
demo="sidecar-demo:$version"
mkdir -p out
start=$SECONDS

echo "image: building with $engine ($($engine --version | head -n 1))"
deploy/bases.sh "$engine"
echo "image: base images ready after $((SECONDS - start))s"

# Every step's output goes to out/image-build.log; the steps themselves are shown as they start.
log=out/image-build.log
: >"$log"
rust="$(sed -n 's/^ARG RUST_IMAGE=//p' deploy/Dockerfile)"
leftovers() { buildah containers --quiet --notruncate --filter "ancestor=$rust" | sort; }
build() { # stage, tag
  echo "image: building stage $1 as $2"
  local status=0
  if [ "$engine" = docker ]; then
    DOCKER_BUILDKIT=1 docker build --pull=false -f deploy/Dockerfile --target "$1" -t "$2" . \
      >>"$log" 2>&1 || status=$?
  else
    # buildah 1.28 leaves behind the working container of a stage that is only copied from
    # (stage rust); those this build made are removed after it.
    local before
    before="$(leftovers)"
    # --layers keeps each step's result, so a rebuild redoes only the steps whose inputs
    # changed; the RUN cache mounts keep pip's downloads and cargo's registry and target dir.
    set +e
    buildah bud --isolation chroot --pull=never --layers \
      --ignorefile deploy/Dockerfile.dockerignore \
      -f deploy/Dockerfile --target "$1" -t "$2" . 2>&1 |
      tee -a "$log" | grep --line-buffered -E '^(STEP|\[[0-9]+/[0-9]+\] STEP)' |
      sed -u 's/^/image:   /'
    status=${PIPESTATUS[0]}
    set -e
    comm -13 <(echo "$before") <(leftovers) |
      xargs -r buildah rm >/dev/null
  fi
  if [ "$status" -ne 0 ]; then
    tail -n 30 "$log" >&2
    die "building stage $1 failed (whole output in $log)"
  fi
  echo "image: $2 built after $((SECONDS - start))s"
}
build runtime "$image"
build demo "$demo"

# OCI archives, then the sizes: the uncompressed layers of the image, and of those the layers
# above the base image's (the runtime stage's own).
base="$(sed -n 's/^ARG PYTHON_IMAGE=//p' deploy/Dockerfile)"
for pair in "$image:out/sidecar-image.tar" "$demo:out/sidecar-demo-image.tar"; do
  name="${pair%:out/*}"
  archive="out/${pair##*:out/}"
  rm -f "$archive"
  if [ "$engine" = docker ]; then
    docker image save -o "$archive" "$name" # an OCI image layout since Docker 25
  else
    buildah push --quiet "$name" "oci-archive:$archive:$name" >/dev/null
  fi
  echo "image: $archive written ($(du -m "$archive" | cut -f1) MB)"
done
python3 deploy/imagesize.py --engine "$engine" --base "$base" out/sidecar-image.tar \
  out/sidecar-demo-image.tar
echo "image: done after $((SECONDS - start))s"
