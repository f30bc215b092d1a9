"""A process with the await chains the task scan follows past a task's own coroutine, for the
task scan's tests (stdlib only, CPython 3.11+; ``--tornado`` adds Tornado's): ``main`` gathers
three tasks (four with ``--tornado``). ``cruncher`` runs ``crunch``, which burns CPU between
``sleep(0)`` calls, so it is mostly running two coroutines deep; ``gatherer`` awaits a
``gather`` of ``gathered_a`` and ``gathered_b``; ``grouper`` waits for the ``member`` of its
``TaskGroup``; each of those parks in ``leaf``'s ``asyncio.sleep``. With ``--tornado``,
``old_request`` awaits an old-school ``@gen.coroutine``, ``old_work``, which yields Tornado's
``gen.sleep``. Prints ``ready`` once they stand. The ``# await:`` comments mark the lines tests
look for.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable
from typing import Any


def burn() -> int:
    total = 0
    for i in range(20_000):
        total += i * i
    return total


async def crunch() -> None:
    while True:
        burn()  # await: crunching
        await asyncio.sleep(0)  # await: crunch


async def cruncher() -> None:
    await crunch()  # await: cruncher


async def leaf() -> None:
    await asyncio.sleep(3600)  # await: leaf


async def gathered_a() -> None:
    await leaf()  # await: gathered_a


async def gathered_b() -> None:
    await leaf()  # await: gathered_b


async def gatherer() -> None:
    await asyncio.gather(gathered_a(), gathered_b())  # await: gatherer


async def member() -> None:
    await leaf()  # await: member


async def grouper() -> None:
    async with asyncio.TaskGroup() as group:  # await: grouper
        group.create_task(member(), name="member")


def old_school() -> Any:
    import tornado.gen

    @tornado.gen.coroutine
    def old_work() -> Any:
        yield tornado.gen.sleep(3600)  # await: old_work

    return old_work


async def old_request(old_work: Any) -> None:
    await old_work()  # await: old_request


async def main(tornado: bool) -> None:
    jobs: list[Awaitable[None]] = [
        asyncio.create_task(cruncher(), name="cruncher"),
        asyncio.create_task(gatherer(), name="gatherer"),
        asyncio.create_task(grouper(), name="grouper"),
    ]
    if tornado:
        jobs.append(asyncio.create_task(old_request(old_school()), name="old_request"))
    await asyncio.sleep(0.2)
    print("ready", flush=True)
    await asyncio.gather(*jobs)  # await: main


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tornado", action="store_true")
    asyncio.run(main(parser.parse_args().tornado))
