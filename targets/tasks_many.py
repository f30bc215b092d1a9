"""A process with many live asyncio tasks parked on known awaits, for the task scan's benchmark
(stdlib only, CPython 3.11+): ``--tasks N`` tasks, each ``request`` awaiting ``handler``; the
even ones park in ``asyncio.sleep`` (``sleeper``), the odd ones on a future that never
completes (``waiter``). A ticker wakes the loop ten times a second so that it is not idle in
one long poll. Prints ``ready`` once every task is parked. The ``# await:`` comments mark the
lines the benchmark's checks look for.
"""

from __future__ import annotations

import argparse
import asyncio


async def sleeper() -> None:
    await asyncio.sleep(3600)  # await: sleeper


async def waiter(future: asyncio.Future[None]) -> None:
    await future  # await: waiter


async def handler(i: int, future: asyncio.Future[None]) -> None:
    if i % 2 == 0:
        await sleeper()  # await: handler_sleeps
    else:
        await waiter(future)  # await: handler_waits


async def request(i: int, future: asyncio.Future[None]) -> None:
    await handler(i, future)  # await: request


async def ticker() -> None:
    while True:
        await asyncio.sleep(0.1)


async def main(count: int) -> None:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    tasks = [asyncio.create_task(request(i, future)) for i in range(count)]
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.2)
    print("ready", flush=True)
    await asyncio.gather(tick, *tasks)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    asyncio.run(main(parser.parse_args().tasks))
