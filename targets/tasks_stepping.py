"""Tasks that step all the time, for the task scan's tests (stdlib only, CPython 3.11+): 300
``handler`` tasks each await ``stage`` (a 2 ms sleep), then sum a generator expression, in a
loop, so that scans meet tasks in the middle of their steps: a read of a task that runs on
must never be taken for a parked one. Prints ``ready`` once they run.
"""

from __future__ import annotations

import argparse
import asyncio


async def stage() -> None:
    await asyncio.sleep(0.002)  # await: stage


async def handler() -> None:
    while True:
        await stage()  # await: handler
        sum(i for i in range(200))


async def main(count: int) -> None:
    tasks = [asyncio.create_task(handler()) for _ in range(count)]
    print("ready", flush=True)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    asyncio.run(main(parser.parse_args().tasks))
