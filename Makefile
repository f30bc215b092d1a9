# The commands the README and CI call. `make install` is idempotent and cheap when nothing changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(BIN)):$(PATH)
NATIVE_SRC := $(shell find native/src -name "*.rs" 2>/dev/null) native/Cargo.toml native/Cargo.lock

.PHONY: install wheel image pythons pyroscope prerequisites demo test test-fast soak lint fmt bench clean

install: $(VENV)/.installed

# Both locks: requirements.lock (what sidecar needs at run time) and requirements-dev.lock (the
# same pins plus tests, lint, benchmarks and maturin); pip refuses if they disagree.
$(VENV)/.deps: requirements.lock requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock -r requirements-dev.lock
	touch $@

# (PIP_QUIET: maturin's pip run lists every dependency already installed otherwise)
$(VENV)/.installed: $(VENV)/.deps pyproject.toml $(NATIVE_SRC)
	PIP_QUIET=1 $(BIN)/maturin develop --release --quiet
	touch $@

# The wheel users install (out/wheels): the package, its native core and the web UI. It needs
# maturin only, at the development lock's pin (the image's build stage installs nothing more).
wheel: $(VENV)/.build-tools
	$(BIN)/maturin build --release --quiet --out out/wheels

$(VENV)/.build-tools: requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $$(grep -E '^maturin==' requirements-dev.lock)
	touch $@

# The container images (deploy/Dockerfile): sidecar:VERSION (runtime lock and wheel only) and
# sidecar-demo:VERSION (plus the demo services), with docker or else buildah, from local base
# images deploy/bases.sh makes where no registry serves them; written as OCI archives to
# out/sidecar-image.tar and out/sidecar-demo-image.tar, with their sizes printed. Minutes the
# first time; the bases and unchanged steps are cached after that.
image:
	deploy/image.sh

# CPython 3.14 and 3.15 from Debian unstable's packages into .cache/pythons, for the version
# tests (3.8-3.13 come from pyenv); prints where each interpreter is.
pythons:
	tests/pythons.sh

# Grafana Pyroscope for the push tests (tests/serve/test_push.py), built from the Go module
# proxy into .cache/pyroscope; prints the binary's path. Minutes the first time, cached after that.
pyroscope:
	tests/pyroscope.sh

# What `make demo` needs from the machine, checked before the build (the Rust core takes minutes
# the first time): one line for each thing missing, and how to get it.
prerequisites:
	@missing=0; \
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "make: $(PYTHON) 3.11 or newer is needed (or: make demo PYTHON=python3.12)"; missing=1; }; \
	command -v cargo >/dev/null || { \
	  echo "make: cargo is needed to build the Rust core (https://rustup.rs, or apt-get install cargo)"; missing=1; }; \
	command -v cc >/dev/null || { echo "make: a C compiler is needed (apt-get install gcc)"; missing=1; }; \
	command -v wrk >/dev/null || { echo "make: wrk is needed to load the demo services (apt-get install wrk)"; missing=1; }; \
	exit $$missing

demo: prerequisites
	@$(MAKE) --no-print-directory install
	$(BIN)/sidecar demo

# Everything. First what times nothing, side by side: the Rust tests, the unit tier as test-fast
# runs it (one pytest per core) and the deploy tier (the wheel, the images, the manifests, a pod:
# builds and packaging, waiting on its own processes); the Rust tests' output comes last. Then
# every other tier in one pytest, alone on the machine (they start timed targets, servers and a
# browser). tests/__init__.py lists the tiers.
test: install
	@out=$$(mktemp); \
	cargo test --manifest-path native/Cargo.toml --release --quiet >$$out 2>&1 & rust=$$!; \
	$(MAKE) --no-print-directory test-fast BESIDE=tests/deploy; status=$$?; \
	wait $$rust || status=1; cat $$out; rm -f $$out; exit $$status
	$(BIN)/pytest --ignore=tests/unit --ignore=tests/deploy

# The unit tier alone (tests/unit: no target process, server or browser), in one pytest per
# core, each with its share of the tests (--shard, tests/conftest.py), and the tier BESIDE names
# (none unless given) in one more pytest at the same time; their outputs follow one another at
# the end. About a minute of CPU for the unit tier.
FAST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
BESIDE ?=

test-fast: install
	@out=$$(mktemp -d); pids=; \
	for i in $$(seq $(FAST_JOBS)); do \
	  $(BIN)/pytest -q tests/unit --shard $$i/$(FAST_JOBS) >$$out/$$i 2>&1 & pids="$$pids $$!"; \
	done; \
	if [ -n "$(BESIDE)" ]; then $(BIN)/pytest $(BESIDE) >$$out/beside 2>&1 & pids="$$pids $$!"; fi; \
	status=0; for pid in $$pids; do wait $$pid || status=1; done; \
	for i in $$(seq $(FAST_JOBS)); do cat $$out/$$i; done; \
	if [ -n "$(BESIDE)" ]; then cat $$out/beside; fi; \
	rm -rf $$out; exit $$status

# Ten minutes of sidecar + two targets under load (make test runs two); report in tests/reports/soak.md
soak: install
	SIDECAR_SOAK_SECONDS=600 $(BIN)/pytest tests/faults/test_soak.py

lint: install
	$(BIN)/ruff check sidecar targets tests benchmarks
	$(BIN)/ruff format --check sidecar targets tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m mypy.stubtest sidecar._native --allowlist native/stubtest-allowlist.txt
	cargo fmt --manifest-path native/Cargo.toml --check
	cargo clippy --manifest-path native/Cargo.toml --release --all-targets -- -D warnings

fmt: install
	$(BIN)/ruff format sidecar targets tests benchmarks
	cargo fmt --manifest-path native/Cargo.toml

# benchmarks/bench.py writes REPORT.md (the performance goals; its storage part a 6-minute run of
# benchmarks/store.py's measurement); the others write their own reports
# (REPORT-versions.md: a sample's cost under each CPython version, with the GIL's reads against
# without them, sidecar beside CPython 3.15's own sampler and py-spy at 1 kHz, and under 3.8-3.15
# the read of the waits for a CPU against without it, both at once, a section `--cpu-wait` runs
# alone, about 15 minutes at 6 s a leg; REPORT-push.md: what pushing to Pyroscope adds to serve's CPU per target;
# REPORT-tasks.md: the asyncio task scan's cost per task and per scan under 3.11-3.14, and with
# 100,000 tasks; REPORT-top.md: the CPU `sidecar top` takes at its default rate, and its target's
# latency beside it; REPORT-cli.md: `sidecar dump` against `py-spy dump`, `sidecar --help`, and
# the time from the start of `stats --pid` to its first sample; REPORT-inputs.md: peak memory and
# time of stats, render and diff on inputs of a million stacks and of 100 MB, about 5 minutes).
# About 82 minutes in all on two cores.
bench: install
	$(BIN)/python -m benchmarks.bench
	$(BIN)/python -m benchmarks.sampler --rounds 2 --seconds 5
	$(BIN)/python -m benchmarks.diff
	$(BIN)/python -m benchmarks.inputs
	$(BIN)/python -m benchmarks.frameworks --rounds 1
	$(MAKE) pythons
	$(BIN)/python -m benchmarks.versions
	$(BIN)/python -m benchmarks.push
	$(BIN)/python -m benchmarks.tasks
	$(BIN)/python -m benchmarks.top
	$(BIN)/python -m benchmarks.cli

clean:
	rm -rf $(VENV) native/target out

# The Kubernetes manifests (deploy/k8s) against the Kubernetes API machinery: a Go checker
# (deploy/k8s/check, modules pinned by its go.sum) and the JSON schemas of a pinned wheel
# (deploy/k8s/check/schemas.txt). tests/deploy/test_k8s.py runs it, so `make test` covers it. The
# first build compiles parts of Kubernetes: minutes on two cores, cached after that.
K8S_CHECK := $(VENV)/k8s/k8s-check
K8S_SCHEMAS := $(VENV)/k8s/schemas
K8S_CHECK_SRC := $(wildcard deploy/k8s/check/*.go) deploy/k8s/check/go.mod deploy/k8s/check/go.sum

.PHONY: k8s-check k8s-check-tools

k8s-check: k8s-check-tools
	$(K8S_CHECK) -schemas $(K8S_SCHEMAS) -ephemeral deploy/k8s/debug/sidecar-debug.yaml deploy/k8s

k8s-check-tools: $(K8S_CHECK) $(K8S_SCHEMAS)/.downloaded

$(K8S_CHECK): $(K8S_CHECK_SRC)
	@mkdir -p $(@D)
	cd deploy/k8s/check && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go build -buildvcs=false -o $(abspath $@) .

$(K8S_SCHEMAS)/.downloaded: deploy/k8s/check/schemas.txt
	rm -rf $(K8S_SCHEMAS)
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --require-hashes -r $< -d $(K8S_SCHEMAS)
	touch $@
