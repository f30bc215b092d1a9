"""Differential profiles of a real target: its handler made three times slower tops the diff
(the diff of given profiles and the CLI: tests/unit/test_diff.py)."""

from __future__ import annotations

import random
import re
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sidecar.formats.inputs import load_profile
from tests.support.helpers import Spawner, sidecar
from tests.support.shares_oracle import counted

# --- a real target, with its handler made 3x slower ------------------------------------------


class _Pacer:
    """Requests about one every `period` s in the background, until stopped.

    The gaps are drawn at random between half and one and a half periods. At an exact period of
    0.1 s the requests keep one phase against the sampler's 10 ms ticks, so a 5 ms handler is
    seen in every sample tick or in none, and its share reads double or nothing (seen: 0.05 and
    0.10 for the same load). The load lasts until the recording beside it has returned, however
    long the recorder takes to start; `limit` bounds the loop if a test never stops it.
    """

    def __init__(self, url: str, period: float, limit: float = 60.0, seed: int = 1) -> None:
        self.url, self.period, self.limit = url, period, limit
        self.random = random.Random(seed)
        self.stop = threading.Event()
        self.done = 0
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        start = time.monotonic()
        due = start
        while not self.stop.is_set() and time.monotonic() - start < self.limit:
            due += self.period * self.random.uniform(0.5, 1.5)
            delay = due - time.monotonic()
            if delay > 0 and self.stop.wait(delay):
                return
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    response.read()
                self.done += 1
            except OSError as error:
                self.errors.append(repr(error))
                return

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the request loop did not stop"
        assert not self.errors, self.errors


def _callers(stacks: dict[str, int], function: str) -> set[str]:
    """The functions found below `function` (towards the root) in any stack that runs it."""
    found: set[str] = set()
    for stack in stacks:
        names = [frame.split(" (")[0] for frame in stack.split(";")]
        if function in names:
            found.update(names[: names.index(function)])
    return found


@pytest.mark.slow
def test_real_target_handler_three_times_slower_tops_the_diff(
    spawn: Spawner, tmp_path: Path
) -> None:
    # "Before" and "after" are two targets of the same app recorded side by side, at the same
    # time: whatever else loads the machine then slows both alike, where two legs one after the
    # other could meet it in one leg only (CI once saw the before leg's handler take twice its
    # usual share, and the ratio of the shares fall to 1.6).
    legs = {"before": 2000, "after": 6000}
    targets = {name: spawn.target("aiohttp_app") for name in legs}
    paths = {name: tmp_path / f"{name}.svg" for name in legs}
    pacers = [
        _Pacer(f"{targets[name].url}/cpu?repeat={repeat}", 0.1) for name, repeat in legs.items()
    ]
    time.sleep(0.5)
    with ThreadPoolExecutor(len(legs)) as pool:
        records = [
            pool.submit(
                sidecar,
                "record",
                "--pid",
                str(targets[name].pid),
                "--duration",
                "4",
                "-o",
                str(paths[name]),
            )
            for name in legs
        ]
        results = [record.result() for record in records]
    for pacer in pacers:
        pacer.finish()
    for result in results:
        assert result.returncode == 0, result.stderr
    result = sidecar(
        "diff", str(paths["before"]), str(paths["after"]), "-o", str(tmp_path / "d.svg")
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # The classifier the handler runs is where the time grew: on top of both tables. In the
    # total table a frame that calls the handler grows at least as much as the handler (the
    # loop's callback runner, aiohttp's request task): it may come first with a row of its own
    # when other work it does (the connections' I/O, the response's write) changed too.
    callers = _callers(load_profile(str(paths["after"])).stacks, "cpu_handler")
    assert "Handle._run" in callers, sorted(callers)
    for title in ("self share", "total share"):
        header = next(
            i for i, line in enumerate(lines) if line.startswith(f"largest changes in {title}")
        )
        rows = lines[header + 2 : lines.index("", header)]
        if title == "total share":
            rows = [row for row in rows if row.split()[3] not in callers]
        top = rows[0]
        assert "targets/handlers.py" in top or "cpu_handler" in top, result.stdout
        assert re.search(r"\+\d+\.\d\d\s", top), top
    # Shares: the handler's total share grew clearly. How far past 3x depends on how busy the
    # machine is (the same work takes longer on a loaded CPU), so only the lower bound holds.
    handler = "cpu_handler (targets/aiohttp_app.py)"
    old = counted(load_profile(str(paths["before"]))).total[handler]
    new = counted(load_profile(str(paths["after"]))).total[handler]
    assert new > 1.8 * old, (old, new)
