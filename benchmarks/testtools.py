"""The test suite's tools the benchmarks use: the CPython builds of ``make pythons``
(tests/pythons.py), a real Pyroscope (tests/pyroscope.py) and a free port (tests/helpers.py).
They import one another by their plain names, as pytest runs them: their folder goes on the
path here, the one place a benchmark reaches into tests/."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import free_port
from pyroscope import Pyroscope, build
from pythons import find_pythons

__all__ = ["Pyroscope", "build", "find_pythons", "free_port"]
