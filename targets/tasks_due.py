"""A loop that a blocking call keeps from its timers, for the task scan's tests (stdlib only,
CPython 3.11+): five ``sleeper`` tasks sleep 50 ms in turn, ``far`` sleeps an hour, and
``blocker`` holds the loop in ``time.sleep`` for 0.5 s after every 10 ms sleep. While it
blocks, the sleepers' sleeps end but their timers cannot run: they are due to run, and wait
for the loop. ``--loop uvloop`` runs the same on uvloop. Prints ``ready`` once they stand.
"""

from __future__ import annotations

import argparse
import asyncio
import time

SLEEPERS = 5


async def sleeper() -> None:
    while True:
        await asyncio.sleep(0.05)  # await: sleeper


async def far() -> None:
    await asyncio.sleep(3600)  # await: far


async def blocker() -> None:
    while True:
        await asyncio.sleep(0.01)  # await: blocker
        time.sleep(0.5)  # await: blocking


async def main() -> None:
    tasks = [asyncio.create_task(sleeper(), name=f"sleeper-{i}") for i in range(SLEEPERS)]
    tasks.append(asyncio.create_task(far(), name="far"))
    tasks.append(asyncio.create_task(blocker(), name="blocker"))
    await asyncio.sleep(0.1)
    print("ready", flush=True)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    if parser.parse_args().loop == "uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())
