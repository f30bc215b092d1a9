"""Tasks started eagerly, for the task scan's tests (stdlib only, CPython 3.12+): ``parent``
makes a ``child`` task with ``eager_start=True`` (as aiohttp does for each request), whose
first step runs at once, inside ``parent``'s own step, burning CPU for about 20 ms before its
first ``await``; then ``parent`` awaits it. With ``--late SECONDS``, ``parent`` burns CPU that
long after making the child and before awaiting it, while the child is parked. Prints
``ready`` once it runs. The ``# await:`` comments mark the lines tests look for.
"""

from __future__ import annotations

import argparse
import asyncio
import time


def burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def child() -> None:
    burn(0.02)  # await: child
    await asyncio.sleep(0.005)  # await: child_sleep


async def parent(late: float) -> None:
    loop = asyncio.get_running_loop()
    while True:
        task = asyncio.Task(child(), loop=loop, eager_start=True)  # await: parent
        burn(late)  # await: late
        await task


async def main(late: float) -> None:
    runner = asyncio.create_task(parent(late), name="parent")
    await asyncio.sleep(0.1)
    print("ready", flush=True)
    await runner  # await: main


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--late", type=float, default=0.0)
    asyncio.run(main(parser.parse_args().late))
