"""Outputs are checked before the work that makes them, never replace an input or (without
``--force``) an existing file, and get the mode the umask gives: the checks, and ``record``,
``render`` and ``diff`` keeping to them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sidecar.errors import SidecarError, UsageError
from sidecar.output import check_output, write_bytes
from tests.support.helpers import sidecar

FOLDED = "main (a.py:1);work (a.py:2) 7\nmain (a.py:1);[idle] 3\n"


def test_an_existing_file_an_input_a_folder_or_nowhere_to_write_are_refused(
    tmp_path: Path,
) -> None:
    out = tmp_path / "p.svg"
    check_output(str(out), force=False)  # a new file: fine
    out.write_text("kept")
    with pytest.raises(UsageError, match=r"p\.svg exists: pass --force to replace it"):
        check_output(str(out), force=False)
    check_output(str(out), force=True)
    with pytest.raises(UsageError, match="is an input of this command"):
        check_output(
            str(out), force=True, inputs=["-", str(tmp_path / ".." / tmp_path.name / "p.svg")]
        )
    with pytest.raises(UsageError, match="is a folder"):
        check_output(str(tmp_path), force=True)
    with pytest.raises(SidecarError, match="no folder"):
        check_output(str(tmp_path / "missing" / "p.svg"), force=False)
    check_output("-", force=False)
    assert out.read_text() == "kept"
    # a device is written into, never replaced, and never refused as an existing file
    check_output(os.devnull, force=False)
    write_bytes(os.devnull, b"into the sink")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_file_gets_the_mode_the_umask_gives(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        write_bytes(str(tmp_path / "new"), b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == mode


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "kept"
    path.write_bytes(b"old")
    path.chmod(0o640)
    write_bytes(str(path), b"new")
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_render_replaces_an_existing_svg_only_with_force(tmp_path: Path) -> None:
    folded = tmp_path / "a1.folded"
    folded.write_text(FOLDED)
    svg = tmp_path / "a1.svg"
    svg.write_text("the recording")
    refused = sidecar("render", str(folded))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"sidecar: error: {svg} exists: pass --force to replace it"
    ]
    assert svg.read_text() == "the recording"
    done = sidecar("render", str(folded), "--force")
    assert done.returncode == 0, done.stderr
    assert "work (a.py:2)" in svg.read_text()
    # an input is never an output, even with --force
    same = sidecar("render", str(folded), "-o", str(folded), "--force")
    assert same.returncode == 2 and "is an input of this command" in same.stderr
    assert folded.read_text() == FOLDED


def test_diff_refuses_to_write_over_its_inputs_or_an_existing_graph(tmp_path: Path) -> None:
    before, after = tmp_path / "a.folded", tmp_path / "b.folded"
    before.write_text(FOLDED)
    after.write_text(FOLDED.replace(" 7\n", " 9\n"))
    over = sidecar("diff", str(before), str(after), "--folded", str(before), "--force")
    assert over.returncode == 2 and "is an input of this command" in over.stderr
    assert before.read_text() == FOLDED
    graph = tmp_path / "b.diff.svg"
    graph.write_text("earlier")
    again = sidecar("diff", str(before), str(after))
    assert again.returncode == 2 and "b.diff.svg exists" in again.stderr
    assert graph.read_text() == "earlier"
    assert sidecar("diff", str(before), str(after), "--force").returncode == 0
    assert "<svg" in graph.read_text()


def test_record_checks_its_output_before_it_samples(tmp_path: Path) -> None:
    """This test's own interpreter, a process record could sample: the bad path is refused
    before any sampling (no "sampling PID" line, and the existing file is kept)."""
    pid = str(os.getpid())
    missing = sidecar("record", "--pid", pid, "--duration", "30",
                      "-o", str(tmp_path / "nonexistent" / "x.svg"))  # fmt: skip
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        f"sidecar: error: cannot write {tmp_path}/nonexistent/x.svg: no folder "
        f"{tmp_path}/nonexistent"
    ]
    existing = tmp_path / "p.folded"
    existing.write_text("kept")
    tasks = sidecar("record", "--pid", pid, "--duration", "30", "-o",
                    str(existing), "--format", "folded")  # fmt: skip
    assert tasks.returncode == 2 and "p.folded exists" in tasks.stderr
    assert "sampling PID" not in tasks.stderr and existing.read_text() == "kept"
