"""The worker's HTTP endpoints, served on its own event loop (docs/operating.md):
GET /livez, /readyz and /metrics. On the loop, not a thread: a worker whose loop is stuck stops
answering, and its liveness probe fails.

The socket is bound before faust starts (`bind`), so a port in use is a start-up error (exit 2),
not a worker running without its probes.

No client of the port can starve the worker of sockets or files (DESIGN 1.2), and none can
take the probes down by holding connections (issue 42): aiohttp caps neither the open
connections nor how long one lasts, and keeps an idle one for an hour. So the site here keeps at
most `MAX_CONNECTIONS` open, and one accepted when they all are *evicts* another rather than
being refused: the oldest that has sent nothing yet, else the oldest of all (a probe or a scrape
sends its request as it connects and is answered within a few turns of the loop, while
`MAX_CONNECTIONS` newer connections would have to arrive meanwhile to make it the oldest). Any
connection is aborted at `MAX_CONNECTION_S`; aiohttp closes one that has no complete request
`IDLE_S` after it opened or after its last response, and answers a request past the size limits
400. Who may connect at all is the NetworkPolicy's business (deploy/k8s/base/networkpolicy.yaml):
the kubelet and Prometheus.
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
# The connections one accept round takes (fds) before the gate sees them. A connection's first
# bytes are read about three turns of the loop after its accept (measured: 11 newer accepts under
# a flood, tests/unit/test_http_bounds.py), so at most ~12 newer ones come in before a probe has
# sent its request: a fifth of the cap, and a probe is never the oldest silent one. (16 let 47 in.)
ACCEPT_BACKLOG = 4
# The kernel's queue of connections not yet accepted: kernel memory, no file of the worker's.
# Deep enough that a flood of reconnecting sockets (hundreds) never fills it: a full queue
# drops a probe's SYN, and its retransmission comes a second later, then three.
LISTEN_QUEUE = 1024
# To send a complete request, from the connect or from the last response. The kubelet's probes
# and Prometheus write their request as soon as the TCP handshake completes, so it arrives
# within one round trip (well under a millisecond in a pod network, tens of ms across zones):
# 2 s is a hundred times that on a loaded node, and a peer that sends nothing holds a slot for
# 2 s at most, so keeping all 64 takes 32 connects a second (which eviction makes harmless
# anyway). Not lower: a request whose first segment was lost is sent again after the
# retransmission timeout (0.2 s at least, 1 s before the connection has measured a round trip)
# and must still get in.
IDLE_S = 2.0
MAX_CONNECTION_S = 30.0  # any connection, busy or not (pipelining, never reading the answers)
MAX_LINE = 2048  # bytes of the request line, and of each header
MAX_HEADERS = 32
MAX_BODY = 1024  # GET only: a body is never read, and a handler that reads one gets 413
WARN_EVERY_S = 60.0  # connections are evicted: said once a minute, not once a connection


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free port); OSError names what failed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_QUEUE)
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
        self.gate: _Gate | None = None  # the connections it holds (a test reads them)

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
        self.gate = _Gate(self._runner.server, self.max_connections, self.max_connection_s)
        await _Site(self._runner, self.sock, self.gate).start()
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
    """aiohttp's SockSite with `_Gate` as the protocol factory. asyncio takes one backlog for
    both the kernel's queue (listen) and how many sockets one accept round opens before the
    gate sees them: the round stays short (`ACCEPT_BACKLOG`), the queue deep (`LISTEN_QUEUE`)."""

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
        self._sock.listen(LISTEN_QUEUE)  # create_server listened with the round's backlog


class _Gate:
    """Makes each accepted connection's protocol: aiohttp's, counted. At most `cap` are open: a
    connection accepted when they all are evicts one first, never itself. The victim is the
    oldest that has sent nothing yet (a probe's connection sends its request at once), else the
    oldest of all (the one that sent its first bytes longest ago). Refusing the new connection
    instead, as before issue 42, let any client hold the cap with idle sockets and close every
    probe and scrape unanswered."""

    def __init__(self, make: Callable[[], asyncio.Protocol], cap: int, lifetime_s: float) -> None:
        self.make, self.cap, self.lifetime_s = make, cap, lifetime_s
        # open connections, oldest first (dicts keep insertion order): those that have sent
        # nothing, by their accept; the others, by their first bytes
        self.silent: dict[_Counted, None] = {}
        self.heard: dict[_Counted, None] = {}
        self.evicted = 0  # connections closed to make room, since the start
        self._quiet_until = 0.0

    @property
    def open(self) -> int:
        return len(self.silent) + len(self.heard)

    def __call__(self) -> asyncio.Protocol:
        if self.open >= self.cap:
            self._evict()
        counted = _Counted(self, self.make())
        self.silent[counted] = None
        return counted

    def _evict(self) -> None:
        victim = next(iter(self.silent or self.heard))
        self.forget(victim)
        victim.abort()
        self.evicted += 1
        now = asyncio.get_running_loop().time()
        if now >= self._quiet_until:
            self._quiet_until = now + WARN_EVERY_S
            log.warning("HTTP: %d connections open, the most it keeps: the oldest (first those "
                        "that sent nothing) are closed to let new ones in (%d so far; a WARNING "
                        "a minute at most)", self.cap, self.evicted)

    def heard_from(self, counted: _Counted) -> None:
        if counted in self.silent:  # else evicted already
            del self.silent[counted]
            self.heard[counted] = None

    def forget(self, counted: _Counted) -> None:
        self.silent.pop(counted, None)
        self.heard.pop(counted, None)


class _Counted(asyncio.Protocol):
    """aiohttp's protocol, counted while its connection is open, aborted at the lifetime bound
    (aiohttp's own timer spares a connection whose request is being answered) or when the gate
    evicts it."""

    def __init__(self, gate: _Gate, inner: asyncio.Protocol) -> None:
        self.gate, self.inner = gate, inner
        self._deadline: asyncio.TimerHandle | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._heard = self._evicted = False

    def abort(self) -> None:
        """Close at once (a reset): now, or as soon as the connection is made."""
        self._evicted = True
        if self._transport is not None:
            self._transport.abort()  # type: ignore[attr-defined]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._deadline = asyncio.get_running_loop().call_later(
            self.gate.lifetime_s, transport.abort)  # type: ignore[attr-defined]
        self.inner.connection_made(transport)
        if self._evicted:  # evicted between its accept and now (one accept round)
            transport.abort()  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        self.gate.forget(self)
        if self._deadline is not None:
            self._deadline.cancel()
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._heard:
            self._heard = True
            self.gate.heard_from(self)
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
