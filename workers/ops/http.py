"""The worker's HTTP endpoints, served on its own event loop (README, "Operating"):
GET /livez, /readyz and /metrics. On the loop, not a thread: a worker whose loop is stuck stops
answering, and its liveness probe fails.

The socket is bound before faust starts (`bind`), so a port in use is a start-up error (exit 2),
not a worker running without its probes.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from mode import Service

from workers.ops.health import Health
from workers.ops.metrics import Metrics

log = logging.getLogger("transcript_owner.http")
CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free port); OSError names what failed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port} (TRANSCRIPT_HTTP_HOST, "
                      f"TRANSCRIPT_HTTP_PORT): {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


class HttpService(Service):
    """Started and stopped with the faust app (a dependency of it)."""

    def __init__(self, sock: socket.socket, health: Health, metrics: Metrics,
                 refresh: Callable[[], Awaitable[None]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sock, self.health, self.metrics, self.refresh = sock, health, metrics, refresh
        self._runner: web.AppRunner | None = None

    async def on_start(self) -> None:
        app = web.Application()
        app.router.add_get("/livez", self._livez)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, self.sock).start()
        host, port = self.sock.getsockname()[:2]
        log.info("HTTP on %s:%s: /livez /readyz /metrics", host, port)

    async def on_stop(self) -> None:
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
