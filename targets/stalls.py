"""An event loop whose callbacks hold it on a schedule, for the stall tests on every version:
``python -m targets.stalls [--rounds N] [--ms MS]``.

Prints "ready", then each half second (``--rounds`` times) schedules the same plain callback
twice, back to back, each holding the loop ``--ms`` milliseconds in ``time.sleep``: two stalls
of the same code at the same depth, with no poll between them. Then it idles. Runs on every
CPython 3.8+.
"""

from __future__ import annotations

import argparse
import asyncio
import time


def hold(ms: float) -> None:
    time.sleep(ms / 1000)


async def main(rounds: int, ms: float) -> None:
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    for _ in range(rounds):
        await asyncio.sleep(0.5)
        loop.call_soon(hold, ms)
        loop.call_soon(hold, ms)
    while True:
        await asyncio.sleep(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ms", type=float, default=150)
    args = parser.parse_args()
    try:
        asyncio.run(main(args.rounds, args.ms))
    except KeyboardInterrupt:
        pass
