"""The demo Tornado service: ``python -m targets.tornado_app [--host H] [--port N] [--uvloop]
[--processes N]`` (N > 1: pre-fork, ``tornado.process.fork_processes``; the parent serves none).

Each handler of "Tornado vs Aiohttp" (Avito) comes twice: new school (``async def``/``await``)
and old school (``@gen.coroutine``/``yield``). Routes: /sleep, /sleep-old, /hard, /hard-old, /cpu,
/executor (the classifier in the loop's thread pool), /blocking, /blocking-fetch, /health; and
/stages (two awaits in turn: a 30 ms fetch, a 10 ms store; /stages-time says how long requests
spent in each so far), and /items/ITEM (an awaited sleep of ``?ms=`` ms, 50 by default: a route
with a parameter), as the aiohttp service has.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import time
from collections.abc import Generator
from typing import Any

import tornado.gen
import tornado.ioloop
import tornado.netutil
import tornado.process
import tornado.util
import tornado.web
from tornado.httpserver import HTTPServer

from targets.handlers import (
    FETCH_TIME,
    SLEEP_TIME,
    STORE_TIME,
    PretendService,
    announce,
    blocking_fetch,
    blocking_sleep,
    classify_path,
    freeze,
)

TIMEOUT = datetime.timedelta(seconds=SLEEP_TIME / 2)


async def work() -> None:
    """Stands in for an asynchronous network call."""
    await tornado.gen.sleep(SLEEP_TIME)


@tornado.gen.coroutine
def old_school_work() -> Generator[Any, Any, None]:
    yield tornado.gen.sleep(SLEEP_TIME)


class SleepHandler(tornado.web.RequestHandler):
    async def get(self) -> None:
        await work()
        self.write("slept\n")


class ItemHandler(tornado.web.RequestHandler):
    async def get(self, item: str) -> None:
        await asyncio.sleep(float(self.get_argument("ms", "50")) / 1000)
        self.write(f"item {item}\n")


class OldSleepHandler(tornado.web.RequestHandler):
    @tornado.gen.coroutine
    def get(self) -> Generator[Any, Any, None]:
        yield old_school_work()
        self.write("slept\n")


class HardWorkHandler(tornado.web.RequestHandler):
    async def get(self) -> None:
        await work()
        await tornado.gen.multi([work(), work()])
        try:
            await tornado.gen.with_timeout(TIMEOUT, work())
        except tornado.util.TimeoutError:
            pass
        self.write("worked\n")


class OldHardWorkHandler(tornado.web.RequestHandler):
    @tornado.gen.coroutine
    def get(self) -> Generator[Any, Any, None]:
        yield old_school_work()
        yield [old_school_work(), old_school_work()]
        try:
            yield tornado.gen.with_timeout(TIMEOUT, old_school_work())
        except tornado.util.TimeoutError:
            pass
        self.write("worked\n")


async def fetch() -> None:
    await asyncio.sleep(FETCH_TIME)  # await: fetch


async def store() -> None:
    await asyncio.sleep(STORE_TIME)  # await: store


#: Seconds requests to /stages spent in each await so far, the loop's delays included.
STAGE_TIME = {"fetch": 0.0, "store": 0.0}


class StagesHandler(tornado.web.RequestHandler):
    async def get(self) -> None:
        began = time.perf_counter()
        await fetch()  # await: stages_fetch
        fetched = time.perf_counter()
        await store()  # await: stages_store
        STAGE_TIME["fetch"] += fetched - began
        STAGE_TIME["store"] += time.perf_counter() - fetched
        self.write("stored\n")


class StagesTimeHandler(tornado.web.RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(STAGE_TIME))


class CpuHandler(tornado.web.RequestHandler):
    async def get(self) -> None:
        repeat = int(self.get_query_argument("repeat", "200"))
        self.write(classify_path(self.request.path, repeat))


class ExecutorHandler(tornado.web.RequestHandler):
    async def get(self) -> None:
        repeat = int(self.get_query_argument("repeat", "200"))
        loop = tornado.ioloop.IOLoop.current()
        self.write(await loop.run_in_executor(None, classify_path, "/x", repeat))


class BlockingHandler(tornado.web.RequestHandler):
    def get(self) -> None:
        blocking_sleep()
        self.write("blocked the loop\n")


class FreezeHandler(tornado.web.RequestHandler):
    def get(self) -> None:
        how = self.get_query_argument("how", "sleep")
        self.write(freeze(how, float(self.get_query_argument("ms", "200"))))


class BlockingFetchHandler(tornado.web.RequestHandler):
    def initialize(self, url: str) -> None:
        self.url = url

    def get(self) -> None:
        self.write(blocking_fetch(self.url))


class HealthHandler(tornado.web.RequestHandler):
    def get(self) -> None:
        self.write("ok\n")


def make_app() -> tornado.web.Application:
    pretend = PretendService()
    return tornado.web.Application(
        [
            (r"/sleep", SleepHandler),
            (r"/sleep-old", OldSleepHandler),
            (r"/hard", HardWorkHandler),
            (r"/hard-old", OldHardWorkHandler),
            (r"/stages", StagesHandler),
            (r"/stages-time", StagesTimeHandler),
            (r"/cpu", CpuHandler),
            (r"/executor", ExecutorHandler),
            (r"/blocking", BlockingHandler),
            (r"/freeze", FreezeHandler),
            (r"/blocking-fetch", BlockingFetchHandler, {"url": pretend.url}),
            (r"/items/([^/]+)", ItemHandler),
            (r"/health", HealthHandler),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 in a pod)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    parser.add_argument(
        "--processes", type=int, default=1, help="worker processes forked from this one"
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="workers that die the parent forks again (tornado's max_restarts)",
    )
    args = parser.parse_args()
    new_loop = asyncio.new_event_loop
    if args.uvloop:
        import uvloop

        new_loop = uvloop.new_event_loop
    sockets = tornado.netutil.bind_sockets(args.port, args.host)
    announce("tornado", sockets[0].getsockname()[1], args.uvloop)
    if args.processes > 1:
        # the parent waits here on its workers and forks again for one that dies, up to
        # --max-restarts times, then ends; each worker returns
        tornado.process.fork_processes(args.processes, max_restarts=args.max_restarts)
    asyncio.set_event_loop(new_loop())
    server = HTTPServer(make_app())
    server.add_sockets(sockets)
    tornado.ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()
