"""An event loop starved of the GIL, for serve's and the UI's tests: ``python -m targets.gil_hog``.

The main thread runs an asyncio loop whose one task awaits 1 ms again and again. A thread named
``cruncher`` runs ``crunch``: pure Python without a pause (what an executor doing JSON or CSV
work does), so it holds the GIL, and the loop, back from each poll, waits for it.
``--no-cruncher`` leaves that thread out. ``--gc`` makes the loop collect garbage: it keeps
200,000 small containers and calls ``gc.collect()`` every 100 ms. Prints "ready" once the loop
runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import threading


def crunch() -> None:
    total = 0
    while True:
        for i in range(1000):
            total += i * i


async def collect(heap: list[list[int]]) -> None:
    while True:
        await asyncio.sleep(0.1)
        gc.collect()


async def serve(collects: bool) -> None:
    collector = None
    if collects:
        heap = [[i] for i in range(200_000)]  # what each full collection walks, kept
        collector = asyncio.ensure_future(collect(heap))
    print("ready", flush=True)
    while collector is None or not collector.done():
        await asyncio.sleep(0.001)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-cruncher", action="store_true", help="no thread holds the GIL")
    parser.add_argument("--gc", action="store_true", help="collect garbage on the loop")
    args = parser.parse_args()
    if not args.no_cruncher:
        threading.Thread(target=crunch, name="cruncher", daemon=True).start()
    try:
        asyncio.run(serve(args.gc))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
