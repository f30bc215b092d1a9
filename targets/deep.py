"""An event loop with deep stacks: ``python -m targets.deep [--depth 17] [--busy 0.1]``.

Inside ``asyncio.run``, a coroutine recurses through three alternating call chains to ``--depth``
frames (about 30 with asyncio's own), and at the bottom either works on CPU or waits in
``time.sleep``, one of four leaf functions each time: a sampler sees on- and off-CPU stacks of
about 30 frames that vary by chain, leaf and line, as in a busy service. ``--busy`` is the share
of each 20 ms on CPU. Prints "ready"; exits after ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import time
from collections.abc import Callable

PERIOD = 0.02


def parse_header(budget: float) -> int:
    total, until = 0, time.perf_counter() + budget
    while time.perf_counter() < until:
        total += sum(i * i for i in range(100))
    return total


def render_body(budget: float) -> int:
    total, until = 0, time.perf_counter() + budget
    while time.perf_counter() < until:
        total += len("".join(str(i) for i in range(50)))
    return total


def wait_backend(seconds: float) -> None:
    time.sleep(seconds)


def wait_cache(seconds: float) -> None:
    time.sleep(seconds)


Leaf = Callable[[], object]


def chain_a(depth: int, leaf: Leaf) -> object:
    return chain_b(depth - 1, leaf) if depth > 1 else leaf()


def chain_b(depth: int, leaf: Leaf) -> object:
    return chain_c(depth - 1, leaf) if depth > 1 else leaf()


def chain_c(depth: int, leaf: Leaf) -> object:
    return chain_a(depth - 1, leaf) if depth > 1 else leaf()


async def serve(depth: int, busy: float, seconds: float | None) -> None:
    end = None if seconds is None else time.monotonic() + seconds
    entries = itertools.cycle((chain_a, chain_b, chain_c))
    works = itertools.cycle((parse_header, render_body))
    waits = itertools.cycle((wait_backend, wait_cache))
    print("ready", flush=True)
    while end is None or time.monotonic() < end:
        next(entries)(depth, functools.partial(next(works), busy * PERIOD))
        next(entries)(depth, functools.partial(next(waits), (1.0 - busy) * PERIOD))
        await asyncio.sleep(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=17, help="frames below the coroutine")
    parser.add_argument("--busy", type=float, default=0.1, help="share of time on CPU (0..1)")
    parser.add_argument("--seconds", type=float, default=None, help="exit after this long")
    args = parser.parse_args()
    asyncio.run(serve(args.depth, min(1.0, max(0.0, args.busy)), args.seconds))


if __name__ == "__main__":
    main()
