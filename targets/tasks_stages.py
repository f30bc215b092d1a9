"""A process with one task that goes through two stages in turn, for the task scan's tests
(stdlib only, CPython 3.11+): ``staged`` awaits ``short_stage`` (``asyncio.sleep`` of 50 ms),
then ``long_stage`` (150 ms), from the same line, over and over, and nothing else allocates in
between. Each stage's coroutine and its ``asyncio.sleep`` are made as the last stage's are
freed, so they are at the last stage's addresses, at the same instruction (the futures at one
of a few: the last one is still held as the task wakes). Prints ``ready``. The ``# await:``
comments mark the lines tests look for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

SHORT = 0.05
LONG = 0.15


async def short_stage() -> None:
    await asyncio.sleep(SHORT)  # await: short


async def long_stage() -> None:
    await asyncio.sleep(LONG)  # await: long


async def staged() -> None:
    stages: list[Callable[[], Coroutine[Any, Any, None]]] = [short_stage, long_stage]
    i = 0
    while True:
        await stages[i % 2]()  # await: staged
        i += 1


async def main() -> None:
    task = asyncio.create_task(staged(), name="staged")
    await asyncio.sleep(0.1)
    print("ready", flush=True)
    await task


if __name__ == "__main__":
    asyncio.run(main())
