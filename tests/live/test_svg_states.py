"""A real recording's flamegraph tells its waits from its code: the aiohttp demo, its loop
blocked in time.sleep, waiting for the GIL a thread holds, collecting garbage and idle between
requests, recorded to an SVG and to folded text rendered into one; each wait's frames in the
UI's fill, a legend of them, the stacks read back as recorded, and ``sidecar diff``'s output in
its own reds and blues (the fills themselves: tests/unit/test_svg_states.py)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from sidecar.formats.inputs import load_profile
from tests.support.helpers import Spawner, sidecar
from tests.unit.test_svg_states import check_painted, frames, legend, patterns


def test_a_recordings_waits_are_painted_in_record_and_render(
    spawn: Spawner, tmp_path: Path
) -> None:
    target = spawn.target("aiohttp_app")
    done = threading.Event()

    def freeze() -> None:
        while not done.is_set():
            for how in ("sleep", "gil", "gc"):
                target.get(f"/freeze?how={how}&ms=300", timeout=30)
                time.sleep(0.1)  # idle between them

    driver = threading.Thread(target=freeze, daemon=True)
    driver.start()
    try:
        svg, folded = tmp_path / "x.svg", tmp_path / "x.folded"
        for out, fmt in ((svg, "svg"), (folded, "folded")):
            result = sidecar(
                "record", "--pid", str(target.pid), "-d", "3", "-f", fmt, "-o", str(out)
            )
            assert result.returncode == 0, result.stderr
    finally:
        done.set()
        driver.join(timeout=30)
    rendered = tmp_path / "rendered.svg"
    result = sidecar("render", str(folded), "-o", str(rendered))
    assert result.returncode == 0, result.stderr
    for drawn in (svg, rendered):
        data = drawn.read_bytes()
        shown = check_painted(data)
        assert {"[idle]", "[blocked]", "[gil]", "[gc]"} <= shown, (drawn, shown)
        # the legend names the states drawn, in the UI's order (check_painted), these among them
        assert {"idle", "blocked", "gil", "gc"} <= {state for state, _, _ in legend(data)}
        assert load_profile(str(drawn)).notes == []  # read from its embedded stacks, exactly
    assert load_profile(str(rendered)).stacks == load_profile(str(folded)).stacks
    # a differential flamegraph keeps its reds and blues, and has no legend of states
    diffed = tmp_path / "diff.svg"
    result = sidecar("diff", str(svg), str(rendered), "-o", str(diffed))
    assert result.returncode == 0, result.stderr
    data = diffed.read_bytes()
    assert legend(data) == [] and not patterns(data)
    assert all(re.fullmatch(r"rgb\(\d+,\d+,\d+\)", fill) for _, fill, _ in frames(data))
