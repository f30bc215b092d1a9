"""Writing results: files replaced atomically, so a failed run never leaves half a file."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from sidecar.errors import SidecarError


def write_text(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` (``-`` is stdout) via a temporary file in the same folder."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` (``-`` is stdout) via a temporary file in the same folder."""
    if path == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    except OSError as err:
        raise SidecarError(f"cannot write {path}: {err.strerror}") from err
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise SidecarError(f"cannot write {path}: {err.strerror}") from err


def read_text(path: str, limit: int = 512 * 1024 * 1024) -> str:
    """Reads a text input (``-`` is stdin), refusing files above ``limit`` bytes."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(limit + 1)
    except OSError as err:
        raise SidecarError(f"cannot read {path}: {err.strerror}") from err
    if len(data) > limit:
        raise SidecarError(f"{path}: larger than {limit // (1024 * 1024)} MB")
    return data.decode("utf-8", errors="replace")


def percent(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"
