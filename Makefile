# The commands the README and CI call. `make install` is idempotent and cheap when nothing changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(BIN)):$(PATH)
NATIVE_SRC := $(wildcard native/src/*.rs) native/Cargo.toml native/Cargo.lock

.PHONY: install demo test lint fmt bench clean

install: $(VENV)/.installed

$(VENV)/.deps: requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	touch $@

$(VENV)/.installed: $(VENV)/.deps pyproject.toml $(NATIVE_SRC)
	$(BIN)/maturin develop --release --quiet
	touch $@

demo: install
	$(BIN)/python -m targets.demo

test: install
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check sidecar targets tests benchmarks
	$(BIN)/ruff format --check sidecar targets tests benchmarks
	$(BIN)/mypy
	cargo fmt --manifest-path native/Cargo.toml --check
	cargo clippy --manifest-path native/Cargo.toml --release -- -D warnings

fmt: install
	$(BIN)/ruff format sidecar targets tests benchmarks
	cargo fmt --manifest-path native/Cargo.toml

bench: install
	$(BIN)/python benchmarks/sampler.py

clean:
	rm -rf $(VENV) native/target out
