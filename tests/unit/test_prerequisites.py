"""``make demo`` checks what it needs from the machine before its build (the Rust core takes
minutes the first time): each thing missing in one line with how to get it, and nothing built."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make") or "/usr/bin/make"


def _bin_with(tmp_path: Path, *tools: str) -> Path:
    """A PATH folder holding only ``tools``, each a link to the machine's own."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        assert found is not None, f"{tool} is not on this machine"
        (folder / tool).symlink_to(found)
    return folder


def _prerequisites(path: Path, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MAKE, "-s", "prerequisites", f"PYTHON={python}"],
        cwd=ROOT,
        env={**os.environ, "PATH": str(path)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_each_missing_tool_is_said_in_one_line_before_anything_is_built(tmp_path: Path) -> None:
    result = _prerequisites(_bin_with(tmp_path, "sh", "cc"))
    assert result.returncode != 0
    said = [line for line in result.stdout.splitlines() if line.startswith("make: ")]
    assert said == [
        "make: cargo is needed to build the Rust core"
        " (https://rustup.rs, or apt-get install cargo)",
        "make: wrk is needed to load the demo services (apt-get install wrk)",
    ], result.stdout


def test_an_old_python_is_said(tmp_path: Path) -> None:
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\nexit 1\n")  # as an interpreter older than 3.11 answers the check
    old.chmod(0o755)
    result = _prerequisites(_bin_with(tmp_path, "sh", "cc", "cargo", "wrk"), str(old))
    assert result.returncode != 0
    assert f"make: {old} 3.11 or newer is needed" in result.stdout, result.stdout


def test_a_machine_with_everything_passes(tmp_path: Path) -> None:
    result = _prerequisites(_bin_with(tmp_path, "sh", "cc", "cargo", "wrk"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_demo_checks_before_it_installs() -> None:
    plan = subprocess.run(
        [MAKE, "-n", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    assert plan.index("cargo is needed") < plan.index("install"), plan
