"""A process with a known number of asyncio tasks parked on one await, for the stored task
profile's tests (stdlib only, CPython 3.11+): ``python -m targets.tasks_parked [--tasks N]``
starts N tasks (default 12) of ``parked``, each waiting on one ``asyncio.Event`` at the line
marked ``# await: parked``, and a ``ticker`` that wakes ten times a second. Prints ``ready``
once every task is parked.
"""

from __future__ import annotations

import argparse
import asyncio


async def parked(event: asyncio.Event) -> None:
    await event.wait()  # await: parked


async def ticker() -> None:
    while True:
        await asyncio.sleep(0.1)  # await: ticker


async def main(count: int) -> None:
    event = asyncio.Event()
    tasks = [asyncio.create_task(parked(event), name=f"parked-{i}") for i in range(count)]
    tasks.append(asyncio.create_task(ticker(), name="ticker"))
    await asyncio.sleep(0.2)
    print("ready", flush=True)
    await asyncio.gather(*tasks)  # await: main


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=12)
    asyncio.run(main(parser.parse_args().tasks))
