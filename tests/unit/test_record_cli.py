"""``sidecar record`` and ``sidecar render`` failing in one line without a target: no such
process, usage errors, a bad input file (against real targets: tests/live/test_record.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.helpers import one_error_line, sidecar


def test_no_such_process() -> None:
    line = one_error_line(sidecar("record", "--pid", str(2**22 + 4321), "--duration", "1"))
    assert "no process with PID" in line


def test_usage_errors_exit_2() -> None:
    assert sidecar("record").returncode == 2
    assert sidecar("record", "--pid", "1", "--duration", "-1").returncode == 2
    assert sidecar("record", "--pid", "1", "--format", "png").returncode == 2


def test_render_command(tmp_path: Path) -> None:
    folded = tmp_path / "in.folded"
    folded.write_text("main (a.py:1);work (a.py:2) 7\nmain (a.py:1);[idle] 3\n")
    result = sidecar("render", str(folded), "--title", "Mine", "--inverted")
    assert result.returncode == 0, result.stderr
    svg = (tmp_path / "in.svg").read_text()
    assert "Mine" in svg and "work (a.py:2) (7 samples, 70.00%)" in svg
    bad = tmp_path / "bad.folded"
    bad.write_text("not folded at all\n")
    line = one_error_line(sidecar("render", str(bad)))
    assert "not folded text" in line
    # --min-width is a percentage of the total: 50% leaves out the 30% frame, keeps the 70% one
    narrow = sidecar("render", str(folded), "-o", str(tmp_path / "narrow.svg"), "--min-width", "50")
    assert narrow.returncode == 0, narrow.stderr
    svg = (tmp_path / "narrow.svg").read_text()
    assert "work (a.py:2) (7 samples" in svg and "[idle] (3 samples" not in svg
    # a percentage: below 0 or above 100 draws nothing sensible, refused in one line (usage)
    for bad in ("-1", "200", "nan"):
        refused = sidecar("render", str(folded), "--min-width", bad, "--force")
        assert refused.returncode == 2, refused
        assert refused.stderr.strip().splitlines()[-1] == (
            f"sidecar render: error: argument --min-width: must be between 0 and 100 (a "
            f"percentage of the total), not {bad}"
        ), refused.stderr
    widest = sidecar("render", str(folded), "-o", str(tmp_path / "all.svg"), "--min-width", "100")
    assert widest.returncode == 0, widest.stderr
    # not drawn (its stack is still in the SVG's embedded folded stacks, which read it back)
    assert "work (a.py:2) (7 samples" not in (tmp_path / "all.svg").read_text()
