#!/usr/bin/env bash
# Grafana Pyroscope for the push tests (tests/serve/test_push.py), built from the Go module proxy into
# .cache/pyroscope/VERSION/pyroscope. Pyroscope's module cannot be `go install`ed: its go.mod
# replaces its nested api module by a directory the module zip lacks. So the module is copied out
# of the module cache, the replace dropped and the published api module (same content) required,
# then the server built without cgo and without the UI assets (the tests use its HTTP API only).
# About six minutes on two cores the first time; prints the binary's path; cheap when done.
set -euo pipefail
cd "$(dirname "$0")/.."
version=v1.21.1
api=v1.5.0
cache="$(pwd -P)/.cache/pyroscope"
bin="$cache/$version/pyroscope"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod GOWORK=off
dir="$(go mod download -json "github.com/grafana/pyroscope@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
if [ -z "$dir" ] || [ ! -f "$dir/go.mod" ]; then
  echo "pyroscope.sh: could not download github.com/grafana/pyroscope@$version" >&2
  exit 1
fi
src="$cache/$version/src"
rm -rf "$src"
mkdir -p "$src"
cp -R "$dir/." "$src/"
rm -f "$src/go.work" "$src/go.work.sum"
chmod -R u+w "$src"
cd "$src"
go mod edit -dropreplace=github.com/grafana/pyroscope/api -require="github.com/grafana/pyroscope/api@$api"
go mod download github.com/grafana/pyroscope/api
CGO_ENABLED=0 go build -buildvcs=false -trimpath -o "$bin.tmp" ./cmd/pyroscope
mv "$bin.tmp" "$bin"
cd "$cache/$version"
rm -rf "$src"
echo "$bin"
