"""An asyncio HTTP/1.0 server on the standard library alone: ``python -m targets.stdlib_server``.

It runs under every CPython the sampler reads (3.8 and later) with nothing installed, for the
version tests. Handlers, on the event-loop thread:

- ``/idle``: answers at once;
- ``/busy?ms=N``: pure-Python work for N ms (in ``忙しく計算``), the loop busy;
- ``/blocked?ms=N``: ``time.sleep`` for N ms, the loop blocked;
- ``/wait?ms=N``: ``await asyncio.sleep`` for N ms, the loop free meanwhile.

Beside the loop, threads named ``worker-Ω`` and ``worker-東京`` wait on a condition. Prints
``listening on http://HOST:PORT`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import urllib.parse

WORKER_NAMES = ("worker-Ω", "worker-東京")


def 忙しく計算(seconds: float) -> int:
    """Pure-Python work on the loop thread for `seconds`."""
    end = time.monotonic() + seconds
    total = 0
    while time.monotonic() < end:
        for i in range(1000):
            total += i * i
    return total


def blocking_sleep(seconds: float) -> None:
    """A synchronous wait inside the event loop: nothing else runs meanwhile."""
    time.sleep(seconds)


async def respond(path: str, seconds: float) -> bytes:
    if path == "/idle":
        return b"idle\n"
    if path == "/busy":
        return b"busy %d\n" % 忙しく計算(seconds)
    if path == "/blocked":
        blocking_sleep(seconds)
        return b"blocked\n"
    if path == "/wait":
        await asyncio.sleep(seconds)
        return b"waited\n"
    raise KeyError(path)


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        request = await reader.readline()
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        try:
            _method, target, _version = request.decode("latin-1").split(" ", 2)
            url = urllib.parse.urlsplit(target)
            ms = float(urllib.parse.parse_qs(url.query).get("ms", ["100"])[0])
            status, body = "200 OK", await respond(url.path, ms / 1000)
        except (ValueError, KeyError):
            status, body = "404 Not Found", b"not found\n"
        head = f"HTTP/1.0 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        writer.write(head.encode() + b"\r\n" + body)
        await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def park(condition: threading.Condition) -> None:
    """A worker thread with nothing to do: it waits to be notified, which never happens."""
    with condition:
        condition.wait()


async def serve(host: str, port: int) -> None:
    server = await asyncio.start_server(handle, host, port)
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on http://{host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args()
    condition = threading.Condition()
    for name in WORKER_NAMES:
        threading.Thread(target=park, args=(condition,), name=name, daemon=True).start()
    try:
        asyncio.run(serve(args.host, args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
