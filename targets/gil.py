"""An event loop beside another thread, for the GIL and GC tests: ``python -m targets.gil``.

The main thread runs an asyncio loop whose one task awaits 1 ms again and again: idle almost
all the time. ``--holder`` starts a second thread, named ``holder``:

- ``spin``: runs pure Python without a pause (what an executor doing JSON or CSV work does):
  it holds the GIL, and the loop, back from each poll, waits for it;
- ``sleep``: sleeps in ``time.sleep`` and ``recv``: waits in a socket read, both releasing
  the GIL (they must cause no wait for it);
- ``none`` (the default): no second thread.

``--gc`` makes the loop collect garbage: it keeps a large heap of containers and calls
``gc.collect()`` every 100 ms, timing every collection with ``gc.callbacks``. SIGUSR1 prints
``gc SECONDS CLOCK``: the seconds spent collecting so far, and the monotonic clock. Runs on
every CPython 3.8+. Prints "ready" once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import socket
import threading
import time

HOLDERS = ("none", "spin", "sleep", "recv")


def spin() -> None:
    total = 0
    while True:
        for i in range(1000):
            total += i * i


def sleep() -> None:
    while True:
        time.sleep(0.05)


def recv() -> None:
    reader, writer = socket.socketpair()
    reader.recv(1)  # nothing is ever written: waits here for good
    writer.close()


class Collections:
    """The time spent in garbage collections, from the collector's own callbacks."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.started = 0.0
        gc.callbacks.append(self.callback)

    def callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self.started

    def report(self) -> None:
        print(f"gc {self.seconds:.6f} {time.monotonic():.6f}", flush=True)


async def collect() -> None:
    # a heap each full collection walks: 200,000 small containers, kept
    heap: list[list[object]] = [[i] for i in range(200_000)]
    while heap:
        await asyncio.sleep(0.1)
        gc.collect()


async def serve(collections: Collections | None) -> None:
    tasks = []
    if collections is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, collections.report)
        tasks.append(asyncio.ensure_future(collect()))
    print("ready", flush=True)
    while True:
        await asyncio.sleep(0.001)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--holder", choices=HOLDERS, default="none")
    parser.add_argument("--gc", action="store_true", help="collect garbage on the loop, timed")
    args = parser.parse_args()
    work = {"spin": spin, "sleep": sleep, "recv": recv}.get(args.holder)
    if work is not None:
        threading.Thread(target=work, name="holder", daemon=True).start()
    collections = Collections() if args.gc else None
    try:
        asyncio.run(serve(collections))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
