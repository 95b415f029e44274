"""The worker's HTTP endpoints, served on its own event loop (docs/operating.md):
GET /livez, /readyz and /metrics. On the loop, not a thread: a worker whose loop is stuck stops
answering, and its liveness probe fails.

The socket is bound before faust starts (`bind`), so a port in use is a start-up error (exit 2),
not a worker running without its probes.

No client of the port can starve the worker of sockets or files (DESIGN 1.2): aiohttp caps
neither the open connections nor how long one lasts, and keeps an idle one for an hour, so the
site here closes a connection past `MAX_CONNECTIONS` as it is accepted, and aborts any at
`MAX_CONNECTION_S`; aiohttp closes one that has no complete request `IDLE_S` after it opened or
after its last response, and answers a request past the size limits 400.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from workers.ops.health import Health
from workers.ops.metrics import Metrics

log = logging.getLogger("transcript_owner.http")
CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"

MAX_CONNECTIONS = 64  # open at once: probes and a scraper need a few; fds the worker can spare
ACCEPT_BACKLOG = 16  # the listen queue, and the connections one accept round takes (fds too)
IDLE_S = 5.0  # to send a complete request, from the connect or from the last response
MAX_CONNECTION_S = 30.0  # any connection, busy or not (pipelining, never reading the answers)
MAX_LINE = 2048  # bytes of the request line, and of each header
MAX_HEADERS = 32
MAX_BODY = 1024  # GET only: a body is never read, and a handler that reads one gets 413
WARN_EVERY_S = 60.0  # the cap is reached: said once a minute, not once a connection


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free port); OSError names what failed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(ACCEPT_BACKLOG)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port} (TRANSCRIPT_HTTP_HOST, "
                      f"TRANSCRIPT_HTTP_PORT): {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


class HttpServer:
    """/livez, /readyz and /metrics on a bound socket; the worker starts and stops it with its
    app (workers/stream/worker.py). The bounds are arguments so that a test can shorten them;
    the worker takes the defaults."""

    def __init__(self, sock: socket.socket, health: Health, metrics: Metrics,
                 refresh: Callable[[], Awaitable[None]], *,
                 max_connections: int = MAX_CONNECTIONS, idle_s: float = IDLE_S,
                 max_connection_s: float = MAX_CONNECTION_S) -> None:
        self.sock, self.health, self.metrics, self.refresh = sock, health, metrics, refresh
        self.max_connections, self.max_connection_s = max_connections, max_connection_s
        self.idle_s = idle_s
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_get("/livez", self._livez)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, logger=_ServerLog(),
            keepalive_timeout=self.idle_s, lingering_time=0,  # an unread body: closed at once
            max_line_size=MAX_LINE, max_field_size=MAX_LINE, max_headers=MAX_HEADERS)
        await self._runner.setup()
        await _Site(self._runner, self.sock,
                    _Gate(self._runner.server, self.max_connections, self.max_connection_s)
                    ).start()
        host, port = self.sock.getsockname()[:2]
        log.info("HTTP on %s:%s: /livez /readyz /metrics", host, port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _livez(self, _: web.Request) -> web.Response:
        ok, reason = self.health.liveness()
        return _json(200 if ok else 503, {"live": ok, "reason": reason})

    async def _readyz(self, _: web.Request) -> web.Response:
        ok, reason = self.health.readiness()
        return _json(200 if ok else 503, {"ready": ok, "reason": reason})

    async def _metrics(self, _: web.Request) -> web.Response:
        try:
            await self.refresh()
        except Exception:  # noqa: BLE001  (the counters are still worth serving)
            log.warning("metrics: the gauges could not be read", exc_info=True)
        return web.Response(body=self.metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE_METRICS})


def _json(status: int, body: dict) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


class _Site(web.BaseSite):
    """aiohttp's SockSite with `_Gate` as the protocol factory; the backlog bounds both the
    kernel's queue and how many sockets one accept round opens before the gate sees them."""

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, gate: _Gate) -> None:
        super().__init__(runner, backlog=ACCEPT_BACKLOG)
        self._sock, self._gate = sock, gate

    @property
    def name(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> None:
        await super().start()
        self._server = await asyncio.get_running_loop().create_server(
            self._gate, sock=self._sock, backlog=self._backlog)


class _Gate:
    """Makes each accepted connection's protocol: aiohttp's, while fewer than `cap` are open;
    past it, one that closes the socket at once, before aiohttp makes anything for it."""

    def __init__(self, make: Callable[[], asyncio.Protocol], cap: int, lifetime_s: float) -> None:
        self.make, self.cap, self.lifetime_s = make, cap, lifetime_s
        self.open = 0
        self._quiet_until = 0.0

    def __call__(self) -> asyncio.Protocol:
        if self.open >= self.cap:
            now = asyncio.get_running_loop().time()
            if now >= self._quiet_until:
                self._quiet_until = now + WARN_EVERY_S
                log.warning("HTTP: %d connections open, the most it keeps: new ones are closed",
                            self.cap)
            return _Refused()
        counted = _Counted(self, self.make())
        self.open += 1
        return counted


class _Refused(asyncio.Protocol):
    """A connection past the cap: closed unanswered, so its client learns at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort()  # type: ignore[attr-defined]


class _Counted(asyncio.Protocol):
    """aiohttp's protocol, counted while its connection is open and aborted at the lifetime
    bound (aiohttp's own timer spares a connection whose request is being answered)."""

    def __init__(self, gate: _Gate, inner: asyncio.Protocol) -> None:
        self.gate, self.inner = gate, inner
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._deadline = asyncio.get_running_loop().call_later(
            self.gate.lifetime_s, transport.abort)  # type: ignore[attr-defined]
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.gate.open -= 1
        if self._deadline is not None:
            self._deadline.cancel()
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class _ServerLog(logging.LoggerAdapter):
    """aiohttp's server log, except that a request it could not parse (answered 400) is one
    debug line naming the error: aiohttp logs an ERROR traceback that quotes the client's
    bytes, and any client could fill the log with them."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("aiohttp.server"), {})

    def log(self, level: int, msg: object, *args: object, exc_info: object = None,
            **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            log.debug("HTTP: a request that does not parse (%s): answered 400, closed",
                      type(exc_info).__name__)
            return
        super().log(level, msg, *args, exc_info=exc_info, **kwargs)
