#!/usr/bin/env bash
# CPython 3.14 and 3.15 for the version tests (tests/live/test_versions.py), from Debian unstable's
# packages, in .cache/pythons/3.X: the packages are fetched with apt through a private sources
# list (the system's apt configuration and state stay as they are) and unpacked with their own
# libc, as the host's is older than they need. The interpreter is copied beside the original and
# the copy patched (patchelf) to start through that libc's ld.so and find its libraries, so it
# runs as a real file (/proc/PID/exe and /proc/PID/maps name it, as sampling tools expect) and
# finds its standard library next to it. 3.8 to 3.13 come from pyenv (tests/support/pythons.py).
#
# Prints one line per interpreter: "3.14 /abs/path/to/python3.14-patched". Cheap when done.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="$(pwd -P)/.cache/pythons"
versions=(3.14 3.15)
arch=x86_64-linux-gnu
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

# The interpreter of version $1 in $2 (a root/ folder) runs, is that version, finds its standard
# library under root/usr and imports what the targets use.
check() {
  "$2/usr/bin/python$1-patched" -I -c "
import sys, asyncio, json, ssl, threading
assert '%d.%d' % sys.version_info[:2] == '$1', sys.version
assert sys.prefix == '$2/usr', sys.prefix
" >/dev/null 2>&1
}

missing=()
for v in "${versions[@]}"; do
  root="$cache/$v/root"
  if [ "$(cat "$cache/$v/ready" 2>/dev/null)" = "$root" ] && check "$v" "$root"; then
    continue
  fi
  missing+=("$v")
done

if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v patchelf >/dev/null 2>&1; then
    echo "pythons: installing patchelf" >&2
    apt-get install -y -qq patchelf >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq patchelf >/dev/null; }
  fi

  apt_dir="$cache/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
  apt_opts=(
    -o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
    -o APT::Sandbox::User=root -qq
  )
  # Signed by the Debian archive keys when the machine's keyring still verifies unstable.
  for options in "signed-by=/usr/share/keyrings/debian-archive-keyring.gpg" "trusted=yes"; do
    echo "deb [$options] http://deb.debian.org/debian unstable main" >"$apt_dir/sources.list"
    if apt-get "${apt_opts[@]}" update >/dev/null 2>&1 &&
      apt-cache "${apt_opts[@]}" show "python${missing[0]}-minimal" >/dev/null 2>&1; then
      break
    fi
    if [ "$options" = trusted=yes ]; then
      echo "pythons: apt cannot read Debian unstable's package lists" >&2
      apt-get "${apt_opts[@]}" update >&2
      exit 1
    fi
    echo "pythons: the keyring does not verify Debian unstable; fetching it unverified" >&2
  done

  for v in "${missing[@]}"; do
    echo "pythons: fetching Python $v from Debian unstable" >&2
    debs="$apt_dir/debs/$v"
    rm -rf "$debs" "$cache/$v"
    mkdir -p "$debs" "$cache/$v/root"
    (cd "$debs" && apt-get "${apt_opts[@]}" download "python$v-minimal" "libpython$v-minimal" \
      "libpython$v-stdlib" libc6 zlib1g libexpat1 libssl3t64 >/dev/null)
    root="$cache/$v/root"
    for deb in "$debs"/*.deb; do
      dpkg -x "$deb" "$root"
    done
    cp "$root/usr/bin/python$v" "$root/usr/bin/python$v-patched"
    # DT_RPATH rather than RUNPATH: it also serves the libraries of extension modules.
    patchelf --set-interpreter "$root/usr/lib/$arch/ld-linux-x86-64.so.2" \
      --force-rpath --set-rpath "\$ORIGIN/../lib/$arch" "$root/usr/bin/python$v-patched"
    if ! check "$v" "$root"; then
      echo "pythons: Python $v from Debian unstable does not run here:" >&2
      "$root/usr/bin/python$v-patched" -I -c 'import sys, asyncio, json, ssl, threading' >&2 ||
        true
      exit 1
    fi
    echo "$root" >"$cache/$v/ready"
    rm -rf "$debs"
  done
fi

for v in "${versions[@]}"; do
  echo "$v $cache/$v/root/usr/bin/python$v-patched"
done
