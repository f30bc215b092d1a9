"""A program that is not Python, for the tests that need one: ``cat``, started and known to run
(it echoed a line back, so its exec and its dynamic loader are done: no wait, no race)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator


@contextlib.contextmanager
def running_cat() -> Iterator[subprocess.Popen[str]]:
    """``cat`` running, its stdin and stdout pipes open; killed and reaped on exit, so its PID
    names no process afterwards."""
    popen = subprocess.Popen(
        ["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    try:
        assert popen.stdin is not None and popen.stdout is not None
        popen.stdin.write("up\n")
        popen.stdin.flush()
        assert popen.stdout.readline() == "up\n"
        yield popen
    finally:
        popen.kill()
        popen.communicate()
