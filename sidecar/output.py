"""Writing results: files replaced atomically, so a failed run never leaves half a file; an
output checked before the work that makes it (never an input, never an existing file unless
asked, in a folder that exists and can be written), and written with the mode the umask gives
(an existing file replaced keeps its own)."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

from sidecar.errors import SidecarError, UsageError

#: The flag that lets an output replace an existing file.
FORCE = "--force"


def add_force(parser: argparse.ArgumentParser) -> None:
    """The commands that write files take ``--force`` to replace existing ones."""
    parser.add_argument(
        FORCE, action="store_true", help="replace output files that exist (default: refuse)"
    )


def check_output(path: str, *, force: bool, inputs: Iterable[str] = ()) -> None:
    """Refuses, before any work, an output that would overwrite one of ``inputs``, or an
    existing file without ``force``, or that cannot be written where it is."""
    if path == "-":
        return
    target = Path(path)
    for source in inputs:
        if source != "-" and _same_file(target, Path(source)):
            raise UsageError(f"{path} is an input of this command: write the output elsewhere")
    folder = target.parent if str(target.parent) else Path(".")
    try:
        mode = _mode_of(target)
        if mode is not None and stat.S_ISDIR(mode):
            raise UsageError(f"{path} is a folder: give a file name")
        if mode is not None and not stat.S_ISREG(mode):
            return  # /dev/null, a pipe: written into, never replaced
        if mode is not None and not force:
            raise UsageError(f"{path} exists: pass {FORCE} to replace it")
        if not folder.is_dir():
            raise SidecarError(f"cannot write {path}: no folder {folder}")
    except OSError as err:  # a folder on the way this user may not enter
        raise SidecarError(f"cannot write {path}: {err.strerror}") from err
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SidecarError(f"cannot write {path}: the folder {folder} is not writable")


def _mode_of(target: Path) -> int | None:
    """The mode of the file at ``target``; None when there is none."""
    try:
        return target.stat().st_mode
    except FileNotFoundError:
        return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


def _mode_for(existing: int | None) -> int:
    """The mode a file written gets: the one it replaces (``existing``), else what the umask
    leaves of 0666 (as ``open`` would give)."""
    if existing is not None:
        return existing & 0o7777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_text(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` (``-`` is stdout) via a temporary file in the same folder."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` (``-`` is stdout) via a temporary file in the same folder."""
    import tempfile  # not for every command that only prints

    if path == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    target = Path(path)
    try:
        existing = _mode_of(target)
    except OSError as err:
        raise SidecarError(f"cannot write {path}: {err.strerror}") from err
    if existing is not None and not stat.S_ISREG(existing):  # /dev/null, a pipe
        try:
            with open(target, "wb") as sink:
                sink.write(data)
        except OSError as err:
            raise SidecarError(f"cannot write {path}: {err.strerror}") from err
        return
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    except OSError as err:
        raise SidecarError(f"cannot write {path}: {err.strerror}") from err
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), _mode_for(existing))
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise SidecarError(f"cannot write {path}: {err.strerror}") from err


def percent(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"
