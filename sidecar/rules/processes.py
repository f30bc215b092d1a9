"""What frames say of a process: which server framework its loop runs, whether the loop is
asyncio's own, and whether it is a pre-fork master or a process pool's child."""

from __future__ import annotations

#: Server files per framework: a loop-thread frame in one of them says which server runs.
SERVER_FILES: dict[str, tuple[str, ...]] = {
    "aiohttp": (
        "aiohttp/web.py",
        "aiohttp/web_protocol.py",
        "aiohttp/web_app.py",
        "aiohttp/web_server.py",
        "aiohttp/web_runner.py",
        "aiohttp/web_urldispatcher.py",
    ),
    "tornado": (
        "tornado/web.py",
        "tornado/httpserver.py",
        "tornado/http1connection.py",
        "tornado/ioloop.py",
        "tornado/platform/asyncio.py",
        "tornado/routing.py",
    ),
}


#: Where a pre-fork master waits on its workers (function, file): gunicorn's arbiter in its main
#: loop (``wait_for_signals`` in gunicorn 27, ``sleep`` in older releases), Tornado's parent in
#: ``fork_processes`` (its children return from it). A worker forked by the arbiter has the
#: arbiter's ``run`` below its own frames, never these.
MASTER_WAITS = (
    ("wait_for_signals", "gunicorn/arbiter.py"),
    ("sleep", "gunicorn/arbiter.py"),
    ("fork_processes", "tornado/process.py"),
)


#: Where a child of multiprocessing (a process pool's worker) runs: forked like a pre-fork
#: worker, but the pool's, not a server's.
POOL_CHILD = (("_bootstrap", "multiprocessing/process.py"),)


#: asyncio's own Python loop; uvloop (a C loop) never shows these frames.
ASYNCIO_LOOP = (("run_forever", "asyncio/base_events.py"), ("_run_once", "asyncio/base_events.py"))
