"""A process with a known tree of named asyncio tasks, for the task scan's tests (stdlib only,
CPython 3.11+): ``main`` gathers ``parent`` and ``spinner``; ``parent`` awaits the task
``child``, whose coroutine awaits ``leaf_sleep``, parked in ``asyncio.sleep``; ``spinner`` burns
CPU between ``sleep(0)`` calls, so it is running or ready. Prints ``ready`` once the tree
stands. The ``# await:`` comments mark the lines tests look for (``spinning``: where the
spinner runs).
"""

from __future__ import annotations

import asyncio


async def leaf_sleep() -> None:
    await asyncio.sleep(3600)  # await: leaf_sleep


async def worker() -> None:
    await leaf_sleep()  # await: worker


async def parent() -> None:
    child = asyncio.create_task(worker(), name="child")
    await child  # await: parent


def burn() -> int:
    total = 0
    for i in range(20_000):
        total += i * i
    return total


async def spinner() -> None:
    while True:
        burn()  # await: spinning
        await asyncio.sleep(0)  # await: spinner


async def main() -> None:
    tasks = [
        asyncio.create_task(parent(), name="parent"),
        asyncio.create_task(spinner(), name="spinner"),
    ]
    await asyncio.sleep(0.2)
    print("ready", flush=True)
    await asyncio.gather(*tasks)  # await: main


if __name__ == "__main__":
    asyncio.run(main())
