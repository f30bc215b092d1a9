"""Tasks that step all the time, for the task scan's tests (stdlib only, CPython 3.11+): 300
``handler`` tasks each await ``stage`` (a 2 ms sleep), then sum a generator expression, in a
loop, so that scans meet tasks in the middle of their steps: a read of a task that runs on
must never be taken for a parked one. Together they hold the loop: a sleep that is over waits
its turn. With ``--truth PATH`` the tasks time themselves, and every 0.2 s PATH holds the
seconds they spent so far waiting (in a sleep not yet over), ready (over, not yet resumed)
and running, as JSON. Prints ``ready`` once they run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

SLEEP = 0.002
#: seconds spent by all the handlers (with --truth)
SPENT = {"waiting": 0.0, "ready": 0.0, "running": 0.0}


async def stage() -> None:
    await asyncio.sleep(SLEEP)  # await: stage


async def handler() -> None:
    while True:
        await stage()  # await: handler
        sum(i for i in range(200))


async def timed_handler() -> None:
    loop = asyncio.get_running_loop()
    while True:
        called = loop.time()
        await stage()
        resumed = loop.time()
        sum(i for i in range(200))
        due = called + SLEEP
        SPENT["waiting"] += min(due, resumed) - called
        SPENT["ready"] += max(0.0, resumed - due)
        SPENT["running"] += loop.time() - resumed


async def write_truth(path: str) -> None:
    while True:
        with open(path + ".tmp", "w") as out:
            json.dump(SPENT, out)
        os.replace(path + ".tmp", path)
        await asyncio.sleep(0.2)


async def main(count: int, truth: str | None) -> None:
    step = timed_handler if truth else handler
    tasks = [asyncio.create_task(step()) for _ in range(count)]
    if truth:
        tasks.append(asyncio.create_task(write_truth(truth)))
    print("ready", flush=True)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--truth", metavar="PATH")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.tasks, arguments.truth))
