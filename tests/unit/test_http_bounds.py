"""What a client of the HTTP port can hold (DESIGN 1.2): connections past the cap are closed as
they are accepted, a connection without a complete request is closed at the idle bound and any
connection at its lifetime, requests past the size limits get 400, and a malformed one is
logged as one debug line without its bytes or a traceback. The server is the worker's
(`HttpServer` on 127.0.0.1:0), on an asyncio loop, its bounds shortened."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from workers.ops.health import Health
from workers.ops.http import MAX_HEADERS, MAX_LINE, HttpServer, bind
from workers.ops.metrics import Metrics

WAIT_S = 10.0  # for an event that should come at once or at a short bound: a hang fails
GET_LIVEZ = b"GET /livez HTTP/1.1\r\nHost: t\r\n\r\n"
GET_METRICS_CLOSE = b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


async def _nothing() -> None:
    return None


@asynccontextmanager
async def serving(refresh: Callable[[], Awaitable[None]] = _nothing,
                  **bounds: Any) -> AsyncIterator[int]:
    """The worker's HTTP service on a free loopback port; yields the port."""
    sock = bind("127.0.0.1", 0)
    service = HttpServer(sock, Health(liveness_timeout_s=10), Metrics(), refresh, **bounds)
    await service.start()
    try:
        yield sock.getsockname()[1]
    finally:
        await service.stop()
        sock.close()


Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(port: int) -> Conn:
    return await asyncio.open_connection("127.0.0.1", port)


async def until_eof(conn: Conn) -> bytes:
    """All the server sends until it closes the connection (a reset counts as a close);
    TimeoutError if it keeps it open."""
    try:
        return await asyncio.wait_for(conn[0].read(), WAIT_S)
    except ConnectionResetError:
        return b""


async def response(conn: Conn) -> bytes:
    """One keep-alive response: its head and its body (Content-Length)."""
    head = await asyncio.wait_for(conn[0].readuntil(b"\r\n\r\n"), WAIT_S)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return head + await asyncio.wait_for(conn[0].readexactly(length), WAIT_S)


def close(*conns: Conn) -> None:
    for _, writer in conns:
        writer.close()


def status(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/") else 0


def test_connections_past_the_cap_are_closed_as_they_are_accepted() -> None:
    async def scenario() -> None:
        async with serving(max_connections=4, idle_s=60) as port:
            held = [await connect(port) for _ in range(4)]
            extra = await connect(port)
            try:
                assert await until_eof(extra) == b""  # closed unanswered, long before 60 s
                held[0][1].write(GET_LIVEZ)  # the held ones are open and served
                assert status(await response(held[0])) == 200
            finally:
                close(extra, *held)

    asyncio.run(scenario())


def test_metrics_answers_once_the_idle_connections_holding_the_cap_are_closed() -> None:
    async def scenario() -> None:
        async with serving(max_connections=4, idle_s=0.5) as port:
            held = [await connect(port) for _ in range(4)]
            try:
                refused = await connect(port)
                assert await until_eof(refused) == b""
                for conn in held:  # the server counts a connection off before it closes it
                    assert await until_eof(conn) == b""
                scrape = await connect(port)
                scrape[1].write(GET_METRICS_CLOSE)
                answer = await until_eof(scrape)
                assert status(answer) == 200 and b"transcript_owner_records_total" in answer
            finally:
                close(*held)

    asyncio.run(scenario())


@pytest.mark.parametrize("sent", [
    b"",  # connected, nothing sent
    b"GET /livez HTTP/1.1\r\nHost: t\r\n",  # a request that never ends (one header at a time)
    GET_LIVEZ,  # keep-alive, idle after its response
], ids=["silent", "unfinished-request", "keep-alive"])
def test_a_connection_without_a_complete_request_is_closed_at_the_idle_bound(sent: bytes) -> None:
    async def scenario() -> None:
        async with serving(idle_s=0.5) as port:
            conn = await connect(port)
            try:
                conn[1].write(sent)
                if sent == GET_LIVEZ:
                    assert status(await response(conn)) == 200
                assert await until_eof(conn) == b""
            finally:
                close(conn)

    asyncio.run(scenario())


def test_a_request_being_answered_is_aborted_at_the_connection_s_lifetime() -> None:
    """aiohttp's idle timer spares a connection whose request is in progress: a scrape whose
    gauges never come back (or a client that never reads its answers) is cut at the lifetime."""
    never = asyncio.Event()

    async def stuck() -> None:
        await never.wait()

    async def scenario() -> None:
        async with serving(stuck, idle_s=0.2, max_connection_s=1.0) as port:
            conn = await connect(port)
            try:
                conn[1].write(GET_METRICS_CLOSE)
                assert await until_eof(conn) == b""
            finally:
                close(conn)
                never.set()  # lets the service stop without waiting on the handler

    asyncio.run(scenario())


@pytest.mark.parametrize("request_bytes", [
    b"GET /" + b"a" * MAX_LINE + b" HTTP/1.1\r\nHost: t\r\n\r\n",
    b"GET /livez HTTP/1.1\r\nHost: t\r\nX-Big: " + b"b" * (MAX_LINE + 1) + b"\r\n\r\n",
    b"GET /livez HTTP/1.1\r\nHost: t\r\n"
    + b"".join(b"X-%d: y\r\n" % i for i in range(MAX_HEADERS + 1)) + b"\r\n",
], ids=["request-line", "header", "header-count"])
def test_a_request_past_the_size_limits_gets_400(request_bytes: bytes) -> None:
    assert 2 * MAX_LINE < 8190 and 2 * MAX_HEADERS < 128  # tighter than aiohttp's defaults

    async def scenario() -> None:
        async with serving() as port:
            conn = await connect(port)
            try:
                conn[1].write(request_bytes)
                assert status(await until_eof(conn)) == 400
            finally:
                close(conn)

    asyncio.run(scenario())


def test_an_unread_body_is_not_waited_for() -> None:
    """GET only: the answer goes out and the connection closes, not a lingering read."""
    async def scenario() -> None:
        async with serving(idle_s=60) as port:
            conn = await connect(port)
            try:
                conn[1].write(b"GET /livez HTTP/1.1\r\nHost: t\r\nContent-Length: 9999999\r\n\r\n"
                              + b"x" * 1000)
                assert status(await until_eof(conn)) == 200
            finally:
                close(conn)

    asyncio.run(scenario())


def test_a_malformed_request_gets_400_and_one_debug_line_without_its_bytes(
        caplog: pytest.LogCaptureFixture) -> None:
    garbage = b"SECRET\x00BYTES\r\n\r\n"

    async def scenario() -> None:
        async with serving(idle_s=60) as port:
            first = await connect(port)  # garbage as the first request
            second = await connect(port)  # and after a good one on the same connection
            try:
                first[1].write(garbage)
                assert status(await until_eof(first)) == 400
                second[1].write(GET_LIVEZ)
                assert status(await response(second)) == 200
                second[1].write(garbage)
                assert status(await until_eof(second)) == 400
            finally:
                close(first, second)

    caplog.set_level(logging.DEBUG)
    asyncio.run(scenario())
    for record in caplog.records:
        assert record.exc_info is None and record.exc_text is None, record.getMessage()
        assert "SECRET" not in record.getMessage() and "BYTES" not in record.getMessage()
    assert not [r for r in caplog.records if r.name.startswith("aiohttp")]
    lines = [r for r in caplog.records if "does not parse" in r.getMessage()]
    assert len(lines) == 2 and all(r.levelno == logging.DEBUG for r in lines)
