"""Task churn for the task scan's tests (stdlib only, CPython 3.11+): a spawner starts short
tasks in bursts, thousands a second, each sleeping a millisecond or two before it ends, so the
registry changes under every scan. Prints ``ready`` once the churn runs. The ``# await:``
comments mark the only lines a task of this file waits at.
"""

from __future__ import annotations

import asyncio

BURST = 100
PAUSE = 0.02


async def short(i: int) -> int:
    await asyncio.sleep(0.001 * (1 + i % 2))  # await: short
    return i


async def spawner() -> None:
    started = 0
    running: set[asyncio.Task[int]] = set()
    while True:
        for _ in range(BURST):
            task = asyncio.create_task(short(started))
            running.add(task)
            task.add_done_callback(running.discard)
            started += 1
        await asyncio.sleep(PAUSE)  # await: spawner


async def main() -> None:
    churn = asyncio.create_task(spawner(), name="spawner")
    await asyncio.sleep(0.2)
    print("ready", flush=True)
    await churn  # await: main


if __name__ == "__main__":
    asyncio.run(main())
