"""An awaitable of the old school, for the task scan's tests (stdlib only, CPython 3.11+):
``gated`` awaits a ``Gate``, whose ``__await__`` is a plain generator that yields the future
it waits on (as asyncio's pure-Python ``Future`` does), so its task parks in that generator's
bare ``yield``. Prints ``ready`` once it stands. The ``# await:`` comments mark the lines
tests look for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any


class Gate:
    """Waits for a future that is never set."""

    def __init__(self) -> None:
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def __await__(self) -> Generator[Any, None, None]:
        if not self.future.done():
            self.future._asyncio_future_blocking = True
            yield self.future  # await: gate
        return self.future.result()


async def gated() -> None:
    await Gate()  # await: gated


async def main() -> None:
    task = asyncio.create_task(gated(), name="gated")
    await asyncio.sleep(0.2)
    print("ready", flush=True)
    await task  # await: main


if __name__ == "__main__":
    asyncio.run(main())
