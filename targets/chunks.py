"""A stack that keeps crossing chunks of CPython's data stack: ``python -m targets.chunks``.

CPython (3.11+) keeps a thread's plain call frames on a data stack of 16 KiB chunks; a call
that does not fit takes a new chunk, and the return that empties it gives the chunk back. Here
the main thread recurses to depths from 100 to 700 frames and back, again and again, with a
property read from C at the bottom, so the frames of its deeper calls lie in chunks it is given
and gives back many times a second, often at the addresses of the last ones. Prints "ready",
holds still for ``--settle`` seconds (so a sampler attaches to a steady stack), then recurses
until ``--seconds`` have passed, and sleeps ``--rest`` seconds more before it exits.
"""

from __future__ import annotations

import argparse
import sys
import time


class Response:
    @property
    def status(self) -> int:
        return 200


def descend(depth: int, response: Response) -> int:
    if depth == 0:
        return sum(response.status for _ in range(300))
    return descend(depth - 1, response) + 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--rest", type=float, default=0.0)
    args = parser.parse_args()
    sys.setrecursionlimit(10_000)
    response = Response()
    print("ready", flush=True)
    time.sleep(args.settle)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for depth in range(100, 700, 3):
            descend(depth, response)
    time.sleep(args.rest)


if __name__ == "__main__":
    main()
