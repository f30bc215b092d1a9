"""How ``sidecar serve`` listens: its socket, bound before anything else starts, and uvicorn's
server, tuned for a sidecar that sits idle most of the time."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from types import FrameType
from typing import Any

from sidecar.errors import SidecarError


def server_for(app: Any, host: str, port: int) -> Any:
    """uvicorn's server, looking for a stop request once a second instead of ten times, and at
    once when a signal asks for it: a sidecar's idle CPU is part of what it costs."""
    import uvicorn

    class Server(uvicorn.Server):
        _wake: asyncio.Event | None = None
        _loop: asyncio.AbstractEventLoop | None = None

        async def main_loop(self) -> None:
            self._wake, self._loop = asyncio.Event(), asyncio.get_running_loop()
            ticks = 0
            # on_tick refreshes the Date header when its counter is a multiple of 10
            while not await self.on_tick(ticks):
                ticks = (ticks + 10) % 864000
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 1.0)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            if self._loop is not None and self._wake is not None:
                self._loop.call_soon_threadsafe(self._wake.set)

    config = uvicorn.Config(
        app, host=host, port=port, loop="uvloop", log_level="warning", access_log=False
    )
    return Server(config)


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound before anything else starts: a taken port or an
    address of no interface is one clear error, with no target sampled and nothing stored."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as err:
        raise SidecarError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as err:
        sock.close()
        raise SidecarError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
    sock.set_inheritable(True)
    return sock
