"""Go's ``pprof`` tool reading the profiles sidecar writes, for the tests that check them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

GO = shutil.which("go") or "/usr/local/go/bin/go"


def pprof(path: Path, *args: str) -> str:
    """``go tool pprof ARGS PATH``'s output; fails the test if Go cannot read the file."""
    done = subprocess.run(
        [GO, "tool", "pprof", *args, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def total(top: str) -> int:
    """The total of ``-top`` over the ``samples`` value."""
    match = re.search(r"of (\d+) total", top)
    assert match, top
    return int(match[1])


def tags(text: str) -> dict[str, dict[str, str]]:
    """``-tags`` output as {key: {value: amount}}."""
    out: dict[str, dict[str, str]] = {}
    key = ""
    for line in text.splitlines():
        head = re.match(r"\s*(\w+): Total", line)
        if head:
            key = head[1]
            out[key] = {}
            continue
        row = re.match(r"\s*(\S+) \(\s*[\d.]+%\): (.+)$", line)
        if row and key:
            out[key][row[2].strip()] = row[1]
    return out
