"""A plain Python process for sampler tests: ``python -m targets.spin [options]``.

Spins on CPU (or sleeps, with --sleep) at the bottom of a recursion --depth frames deep, in
functions with non-ASCII names (Latin-1 and CJK) when --unicode is given. Prints "ready" when
it gets there. With --generator-thread, a thread started on a generator's ``send`` naps too:
the generator's frame is that thread's first, linked to no caller.
"""

from __future__ import annotations

import _thread
import argparse
import sys
import time
from collections.abc import Iterator


def spin(seconds: float | None) -> None:
    end = None if seconds is None else time.monotonic() + seconds
    total = 0
    while end is None or time.monotonic() < end:
        for i in range(1000):
            total += i * i


def nap(seconds: float | None) -> None:
    end = None if seconds is None else time.monotonic() + seconds
    while end is None or time.monotonic() < end:
        time.sleep(0.5)


def generator_root(seconds: float | None) -> Iterator[None]:
    nap(seconds)
    yield


def 更に深く(work: object) -> None:
    work()  # type: ignore[operator]


def rückwärts_tiefer(depth: int, work: object) -> None:
    if depth > 1:
        rückwärts_tiefer(depth - 1, work)
    else:
        print("ready", flush=True)
        更に深く(work)


def deeper(depth: int, work: object) -> None:
    if depth > 1:
        deeper(depth - 1, work)
    else:
        print("ready", flush=True)
        work()  # type: ignore[operator]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--unicode", action="store_true")
    parser.add_argument("--sleep", action="store_true", help="wait off CPU instead of spinning")
    parser.add_argument("--seconds", type=float, default=None, help="exit after this long")
    parser.add_argument(
        "--generator-thread", action="store_true", help="a thread that naps in a generator"
    )
    args = parser.parse_args()
    if args.generator_thread:
        _thread.start_new_thread(generator_root(args.seconds).send, (None,))
    sys.setrecursionlimit(max(1000, args.depth + 100))
    body = nap if args.sleep else spin
    recurse = rückwärts_tiefer if args.unicode else deeper
    recurse(args.depth, lambda: body(args.seconds))


if __name__ == "__main__":
    main()
