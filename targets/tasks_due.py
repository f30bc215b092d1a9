"""A loop that a blocking call keeps from its timers, for the task scan's tests (stdlib only,
CPython 3.11+): five ``sleeper`` tasks sleep 50 ms in turn, ``far`` sleeps an hour, and
``blocker`` holds the loop in ``time.sleep`` for 0.5 s after every 10 ms sleep. While it
blocks, the sleepers' sleeps end but their timers cannot run: they are due to run, and wait
for the loop. ``--loop uvloop`` runs the same on uvloop. ``--cancel-timers`` has ``blocker``
also start and cancel 300 hour-long timers after each block, so that the loop, finding most
of its timers cancelled, replaces its heap of timers (``_scheduled``) with a new list every
cycle. Prints ``ready`` once they stand.
"""

from __future__ import annotations

import argparse
import asyncio
import time

SLEEPERS = 5
#: more than the 100 timers below which asyncio never rebuilds its heap
CANCELLED = 300


async def sleeper() -> None:
    while True:
        await asyncio.sleep(0.05)  # await: sleeper


async def far() -> None:
    await asyncio.sleep(3600)  # await: far


async def blocker(cancel_timers: bool) -> None:
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(0.01)  # await: blocker
        time.sleep(0.5)  # await: blocking
        if cancel_timers:
            for timer in [loop.call_later(3600, print) for _ in range(CANCELLED)]:
                timer.cancel()


async def main(cancel_timers: bool) -> None:
    tasks = [asyncio.create_task(sleeper(), name=f"sleeper-{i}") for i in range(SLEEPERS)]
    tasks.append(asyncio.create_task(far(), name="far"))
    tasks.append(asyncio.create_task(blocker(cancel_timers), name="blocker"))
    await asyncio.sleep(0.1)
    print("ready", flush=True)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--cancel-timers", action="store_true")
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(main(args.cancel_timers))
    else:
        asyncio.run(main(args.cancel_timers))
