"""The demo aiohttp service: ``python -m targets.aiohttp_app [--host H] [--port N] [--uvloop]``.

Routes: /sleep (50 ms awaited sleep), /stages (two awaits in turn: a 30 ms fetch, a 10 ms
store; /stages-time says how long requests spent in each so far), /hard (sequential,
concurrent and timed-out awaits), /cpu (pure-Python classifier), /executor (the classifier in
the loop's thread pool, ``run_in_executor``: the pool's threads hold the GIL the loop needs),
/blocking (time.sleep inside the loop), /blocking-fetch (a synchronous HTTP call inside the
loop), /items/{item} (an awaited sleep of ``?ms=`` ms, 50 by default: a route with a
parameter), /health. ``--access-log`` turns aiohttp's access log on (to nowhere): aiohttp then
keeps each request's start. With ``--pool N``
the service owns a process pool of N forked workers (multiprocessing's fork start method) and
/offload runs the classifier there, as services offload CPU work.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import socket
import time
from concurrent.futures import ProcessPoolExecutor

from aiohttp import web

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


async def work() -> None:
    """Stands in for an asynchronous network call."""
    await asyncio.sleep(SLEEP_TIME)


async def sleep_handler(request: web.Request) -> web.Response:
    await work()
    return web.Response(text="slept\n")


async def item_handler(request: web.Request) -> web.Response:
    await asyncio.sleep(float(request.query.get("ms", "50")) / 1000)
    return web.Response(text=f"item {request.match_info['item']}\n")


async def fetch() -> None:
    await asyncio.sleep(FETCH_TIME)  # await: fetch


async def store() -> None:
    await asyncio.sleep(STORE_TIME)  # await: store


#: Seconds requests to /stages spent in each await so far, the loop's delays included.
STAGE_TIME = {"fetch": 0.0, "store": 0.0}


async def stages_handler(request: web.Request) -> web.Response:
    began = time.perf_counter()
    await fetch()  # await: stages_fetch
    fetched = time.perf_counter()
    await store()  # await: stages_store
    STAGE_TIME["fetch"] += fetched - began
    STAGE_TIME["store"] += time.perf_counter() - fetched
    return web.Response(text="stored\n")


async def stages_time(request: web.Request) -> web.Response:
    return web.json_response(STAGE_TIME)


async def hard_handler(request: web.Request) -> web.Response:
    await work()
    await asyncio.gather(work(), work())
    try:
        await asyncio.wait_for(work(), timeout=SLEEP_TIME / 2)
    except asyncio.TimeoutError:
        pass
    return web.Response(text="worked\n")


async def cpu_handler(request: web.Request) -> web.Response:
    repeat = int(request.query.get("repeat", "200"))
    return web.Response(body=classify_path(request.path, repeat))


async def executor_handler(request: web.Request) -> web.Response:
    repeat = int(request.query.get("repeat", "200"))
    loop = asyncio.get_running_loop()
    return web.Response(body=await loop.run_in_executor(None, classify_path, "/x", repeat))


async def blocking_handler(request: web.Request) -> web.Response:
    blocking_sleep()
    return web.Response(text="blocked the loop\n")


async def freeze_handler(request: web.Request) -> web.Response:
    how = request.query.get("how", "sleep")
    return web.Response(text=freeze(how, float(request.query.get("ms", "200"))))


def make_app(pool: ProcessPoolExecutor | None = None) -> web.Application:
    pretend = PretendService()

    async def blocking_fetch_handler(request: web.Request) -> web.Response:
        return web.Response(body=blocking_fetch(pretend.url))

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def offload(request: web.Request) -> web.Response:
        if pool is None:
            raise web.HTTPNotFound(text="start the service with --pool N\n")
        repeat = int(request.query.get("repeat", "200"))
        loop = asyncio.get_running_loop()
        return web.Response(body=await loop.run_in_executor(pool, classify_path, "/x", repeat))

    app = web.Application()
    app.add_routes(
        [
            web.get("/sleep", sleep_handler),
            web.get("/stages", stages_handler),
            web.get("/stages-time", stages_time),
            web.get("/hard", hard_handler),
            web.get("/cpu", cpu_handler),
            web.get("/executor", executor_handler),
            web.get("/blocking", blocking_handler),
            web.get("/freeze", freeze_handler),
            web.get("/blocking-fetch", blocking_fetch_handler),
            web.get("/items/{item}", item_handler),
            web.get("/health", health),
            web.get("/offload", offload),
        ]
    )
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 in a pod)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    parser.add_argument("--pool", type=int, default=0, help="forked process pool for /offload")
    parser.add_argument("--access-log", action="store_true", help="aiohttp's access log on")
    args = parser.parse_args()
    pool = None
    if args.pool:  # forked before any thread starts, its workers all up before the port is said
        pool = ProcessPoolExecutor(args.pool, mp_context=multiprocessing.get_context("fork"))
        for done in [pool.submit(classify_path, "/warm", 1) for _ in range(args.pool * 4)]:
            done.result()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)  # accept connections from the moment the port is announced
    loop: asyncio.AbstractEventLoop
    if args.uvloop:
        import uvloop

        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    announce("aiohttp", sock.getsockname()[1], args.uvloop)
    access_log = None
    if args.access_log:  # enabled at INFO, written nowhere
        access_log = logging.getLogger("aiohttp.access")
        access_log.setLevel(logging.INFO)
        access_log.addHandler(logging.NullHandler())
        access_log.propagate = False
    web.run_app(make_app(pool), sock=sock, loop=loop, print=None, access_log=access_log)


if __name__ == "__main__":
    main()
