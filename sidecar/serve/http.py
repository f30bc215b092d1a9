"""How ``sidecar serve`` listens: its socket, bound before anything else starts, and uvicorn's
server, tuned for a sidecar that sits idle most of the time, with two limits of its own on its
connections (``HttpLimits``): how many at once, and how long a client may take to send a
request's headers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

from sidecar import defaults
from sidecar.errors import SidecarError

log = logging.getLogger("sidecar.serve")
#: Seconds a client has to send a request's headers, from its connection or the end of the
#: response before (``--header-timeout``).
HEADER_TIMEOUT = defaults.HEADER_TIMEOUT_S
#: Seconds between two WARNING lines about connections closed at the cap.
WARN_EVERY = 60.0


@dataclass
class HttpLimits:
    """The limits on HTTP connections, and what they did (for /healthz and /metrics)."""

    #: Connections at once (``--max-connections``); one more is closed as soon as it is
    #: accepted, before it is read: uvicorn's ``limit_concurrency`` would answer it 503, but
    #: only once its request came, holding its descriptor until then.
    max_connections: int
    #: Seconds for a request's headers (``--header-timeout``): uvicorn has no such timeout.
    header_timeout: float = HEADER_TIMEOUT
    #: Connections open now, closed at the cap, closed for headers too slow.
    connections: int = 0
    refused: int = 0
    timed_out: int = 0
    _warned_at: float | None = None

    def refuse(self) -> None:
        self.refused += 1
        now = time.monotonic()
        if self._warned_at is None or now - self._warned_at >= WARN_EVERY:
            self._warned_at = now
            log.warning(
                "%d HTTP connections at once, the most allowed (--max-connections): closing "
                "new ones until some end (%d closed so far)",
                self.max_connections,
                self.refused,
            )


def protocol_for(base: type[asyncio.Protocol], limits: HttpLimits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol ``base`` with ``limits``: past ``max_connections`` a new
    connection is closed at once; a connection that has not sent a request's complete headers
    ``header_timeout`` seconds after it opened, or after the response before, is closed. Only
    uvicorn's ``connections``, ``cycle`` (a new one for each request whose headers are in) and
    ``cycle.response_complete`` are relied on, which its h11 and httptools protocols share."""

    class Limited(base):  # type: ignore[valid-type, misc]
        _refused = False
        _header_timer: asyncio.TimerHandle | None = None
        _awaited: object = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            if len(self.connections) >= limits.max_connections:
                self._refused = True
                limits.refuse()
                transport.abort()  # its descriptor back at once
                return
            super().connection_made(transport)
            limits.connections = len(self.connections)
            self._expect_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            self._stop_header_timer()
            super().connection_lost(exc)
            limits.connections = len(self.connections)

        def data_received(self, data: bytes) -> None:
            between = self.cycle is None or self.cycle.response_complete
            if self._header_timer is None and between:
                self._expect_headers()  # the first bytes of the next request
            super().data_received(data)
            if self._header_timer is not None and self.cycle is not self._awaited:
                self._stop_header_timer()  # its headers are in

        def _expect_headers(self) -> None:
            self._awaited = self.cycle
            self._header_timer = self.loop.call_later(limits.header_timeout, self._headers_late)

        def _stop_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.cycle is self._awaited and not self.transport.is_closing():
                limits.timed_out += 1
                self.transport.close()

    Limited.__name__ = Limited.__qualname__ = f"Limited{base.__name__}"
    return Limited


def server_for(app: Any, host: str, port: int, limits: HttpLimits) -> Any:
    """uvicorn's server, looking for a stop request once a second instead of ten times, and at
    once when a signal asks for it: a sidecar's idle CPU is part of what it costs. Its
    connections are held to ``limits``."""
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

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
        app,
        host=host,
        port=port,
        loop="uvloop",
        log_level="warning",
        access_log=False,
        http=protocol_for(AutoHTTPProtocol, limits),
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
