"""The walker's stacks of a busy asyncio service keep their root: every sample of the loop's
thread begins at the script's ``<module>`` frame, coroutine frames and all.

The target runs on while the walker reads it, so a read is not of one instant: a coroutine's
frame read just before it was resumed links to no caller, and in 3.11 a ``_PyCFrame`` whose C
call has just returned still names the frame it ran. Such a walk ended at the coroutine's frame
(samples through aiohttp's handlers began at ``RequestHandler._handle_request``); the walker now
checks any walk that does not end at the thread's first frame and reads a torn one again.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from sidecar import _native
from tests.support.faultkit import left_stopped_or_traced
from tests.support.helpers import LoadDriver, Spawner, wait_until
from tests.support.pythons import WALKED, interpreter

#: What every stack of the service's main thread begins with (``python -m targets.aiohttp_app``).
ROOT = (
    "_run_module_as_main (<frozen runpy>:",
    "_run_code (<frozen runpy>:",
    "<module> (targets/aiohttp_app.py:",
)
HANDLER = "cpu_handler (targets/aiohttp_app.py:"


def without_root(counts: Counter[str], root: tuple[str, ...]) -> dict[str, int]:
    """The stacks of ``counts`` (with their counts) that do not begin with the frames of
    ``root`` (each given by its start), in order."""
    return {
        stack: n
        for stack, n in counts.items()
        if stack.count(";") < len(root) - 1
        or not all(f.startswith(r) for f, r in zip(stack.split(";"), root, strict=False))
    }


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_every_sample_of_a_busy_service_has_its_root(
    spawn: Spawner, load: LoadDriver, loop: str
) -> None:
    """aiohttp under the venv's Python (3.11) on ``loop``, saturated with short /cpu requests
    (a handler step of about a millisecond, many coroutine switches a request), sampled at
    200 Hz for 6 s: about 1,200 samples, most of them through the handler's coroutine. Each of
    them has the root; a tick whose reads all tore is an error, and few are."""
    target = spawn.target("aiohttp_app", *(["--uvloop"] if loop == "uvloop" else []))
    with _native.Sampler(target.pid, rate_hz=200) as sampler:
        # the walker is checked against py-spy on the idle service before the load begins
        assert wait_until(lambda: sampler.stats()["samples"] > 0)
        load.start(target.url + "/cpu?repeat=20", seconds=8, connections=8)
        time.sleep(6.0)
        windows = sampler.drain(flush=True)
        stats = sampler.stats()
    assert stats["reader"].startswith("walker (Python 3.11."), stats["reader"]
    main: Counter[str] = Counter()
    for window in windows:
        for row in window["stacks"]:
            if row.thread_id == target.pid:
                main[row.stack] += row.count
    rootless = without_root(main, ROOT)
    through = sum(count for stack, count in main.items() if HANDLER in stack)
    assert through >= 200, (through, main.most_common(3))
    assert not rootless, (sum(rootless.values()), sorted(rootless.items(), key=lambda i: -i[1])[:5])
    ticks = stats["samples"] + stats["errors"]
    assert stats["errors"] <= 0.05 * ticks, (stats["errors"], ticks, stats["last_error"])


@pytest.mark.parametrize("version", WALKED)
def test_a_stack_that_keeps_crossing_chunks_of_data_stack_keeps_its_root(
    spawn: Spawner, version: str
) -> None:
    """``targets/chunks.py`` recurses to 100-700 frames and back without pause, so its deeper
    frames lie in chunks of data stack that the thread is given and gives back many times a
    second. Read at 300 Hz for 6 s, every sample begins at the script's root: a walk that
    reached a frame of a chunk given back and given again (zeros until the thread recurses
    that deep again) is a torn read. Before the walker knew it, 1-9 samples of each version's
    1,200-1,700 here began under ``descend``. Many ticks tear and are read again; enough
    stand."""
    target = spawn.target("chunks", "--seconds", "30", python=interpreter(version))
    with _native.Sampler(target.pid, rate_hz=300) as sampler:
        time.sleep(6.0)
        windows = sampler.drain(flush=True)
        stats = sampler.stats()
    assert stats["reader"].startswith("walker"), stats["reader"]
    counts: Counter[str] = Counter()
    for window in windows:
        for row in window["stacks"]:
            counts[row.stack] += row.count
    total = sum(counts.values())
    deep = sum(n for stack, n in counts.items() if stack.count("descend (") >= 150)
    root = ("_run_module_as_main (<frozen runpy>:", "_run_code (<frozen runpy>:")
    root += ("<module> (targets/chunks.py:", "main (targets/chunks.py:")
    rootless = without_root(counts, root)
    assert total >= 600 and deep >= 100, (total, deep, stats["errors"], stats["last_error"])
    assert not rootless, (sum(rootless.values()), [s[:160] for s in rootless][:3])


@pytest.mark.parametrize("version", WALKED)
def test_a_target_whose_stacks_change_under_every_read_is_checked_with_its_threads_stopped(
    spawn: Spawner, version: str
) -> None:
    """The walker is checked against py-spy when a sampler attaches: both read until a pair
    agrees. ``targets/chunks.py`` without its settling second changes its 100-700-frame stack
    faster than two reads, so the running target can tear every pair: then the pairs are read
    with its threads stopped. Before, 8 of 10 attaches of 3.11 here (and every one of 3.15)
    fell back to py-spy for the whole session ("walker check failed"), and some were refused
    outright: py-spy checks the interpreter it finds by reading a stack, which tore (6 of 40 on
    3.13; its last attachment now holds the threads stopped too). The walker reads it now, and
    the target is left running, untraced."""
    target = spawn.target("chunks", "--seconds", "30", "--settle", "0", python=interpreter(version))
    time.sleep(0.3)
    with _native.Sampler(target.pid, rate_hz=100) as sampler:
        assert wait_until(lambda: sampler.stats()["samples"] > 0)
        reader = sampler.stats()["reader"]
    assert reader.startswith(f"walker (Python {version}."), reader
    assert not left_stopped_or_traced(target.pid)
    assert target.popen.poll() is None
