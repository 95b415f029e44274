"""`SessionReader`: the asyncio face of BlockingSessionReader (transcript_connector.reader), with
the same options, sources, results and errors.

kafka-python and SQLite block, so the reader runs on one thread of its own, as the publisher
does; its loop takes calls from a queue and advances every read in progress at once, waiting on
the source in slices of a few milliseconds between: a read waiting for a stalled partition does
not hold up a read of another, and a new read starts within a slice. A result is handed to the
awaiting coroutine on its own event loop.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar

from transcript_connector.errors import ConnectorError, ReadError
from transcript_connector.publisher import Delivery
from transcript_connector.reader import BlockingSessionReader, PartitionHeld, _Read
from transcript_connector.reader_options import ReaderOptions, reader_options_from_env
from transcript_connector.reader_plan import LATEST, Bound, SessionRead

ASYNC_SLICE_S = 0.005  # the longest one wait on the source before the loop takes new reads

T = TypeVar("T")


@dataclass(eq=False)
class _Request:
    """A call handed to the reader's thread; `future` resolved on the caller's loop."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    read: _Read | None = None
    call: Callable[[], Any] | None = None


class SessionReader:
    """`async with SessionReader(options) as r: await r.read(key, at=...)`: the asyncio face
    of BlockingSessionReader (same options, sources and errors). kafka-python and SQLite are
    blocking: they run on one thread of the reader's own, whose loop serves every awaiting
    read at once. Cancelling an awaiting read drops it."""

    def __init__(self, options: ReaderOptions, *, database: str | os.PathLike[str] | None = None
                 ) -> None:
        self.options = options
        self._reader = BlockingSessionReader(options, database=database)
        self._requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> Self:
        database = overrides.pop("database", None)
        return cls(reader_options_from_env(environ, **overrides), database=database)

    async def __aenter__(self) -> Self:
        try:
            await self.connect()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def connect(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="transcript-reader",
                                            daemon=True)
            self._thread.start()
        await self._call(self._reader.connect)

    async def read(self, session_key: str, *, at: Bound | Delivery = LATEST,
                   timeout_s: float | None = None) -> SessionRead:
        """As BlockingSessionReader.read, awaited."""
        read = self._reader._new(session_key, at, timeout_s)
        request = self._request()
        request.read = read
        self._put(request)
        result: SessionRead = await request.future
        return result

    async def partitions(self) -> dict[int, PartitionHeld]:
        return await self._call(self._reader.partitions)

    async def close(self) -> None:
        """Fails reads still waiting (ReadError), closes the clients and the thread."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._requests.put(None)
        await asyncio.to_thread(thread.join)

    def _request(self) -> _Request:
        loop = asyncio.get_running_loop()
        return _Request(loop, loop.create_future())

    def _put(self, request: _Request) -> None:
        if self._thread is None:
            raise ReadError("not connected: call connect() first (or use `async with`)")
        self._requests.put(request)

    async def _call(self, call: Callable[[], T]) -> T:
        request = self._request()
        request.call = call
        self._put(request)
        result: T = await request.future
        return result

    # --- the reader's thread ------------------------------------------------------------

    def _serve(self) -> None:
        """Takes calls and reads; advances every read in progress; waits on the source."""
        reader = self._reader
        waiting: list[_Request] = []
        try:
            while True:
                try:
                    item = self._requests.get(block=not waiting)
                    while True:
                        if item is None:
                            return
                        self._take(item, waiting)
                        item = self._requests.get_nowait()
                except queue.Empty:
                    pass
                for request in list(waiting):
                    assert request.read is not None
                    if request.future.cancelled():
                        reader._finish(request.read, ReadError("cancelled"))
                    elif not _advance(reader, request.read):
                        continue
                    waiting.remove(request)
                    _settle(request, request.read.outcome)
                if waiting:
                    try:
                        reader._wait([r.read for r in waiting if r.read], ASYNC_SLICE_S)
                    except ConnectorError as exc:
                        for request in waiting:
                            assert request.read is not None
                            reader._finish(request.read, exc)
                            _settle(request, exc)
                        waiting.clear()
        finally:
            closed = ReadError("the reader was closed")
            for request in waiting:
                _settle(request, closed)
            while True:  # calls made as it closed
                try:
                    late = self._requests.get_nowait()
                except queue.Empty:
                    break
                if late is not None:
                    _settle(late, closed)
            reader.close()

    def _take(self, request: _Request, waiting: list[_Request]) -> None:
        if request.call is not None:
            try:
                _settle(request, request.call())
            except BaseException as exc:  # noqa: BLE001  (handed to the awaiting caller)
                _settle(request, exc)
            return
        read = request.read
        assert read is not None
        try:
            self._reader._start(read)
        except Exception as exc:  # noqa: BLE001  (a bug: the caller gets it, the loop goes on)
            self._reader._finish(read, _unexpected(exc))
        if read.outcome is not None:
            _settle(request, read.outcome)
        else:
            waiting.append(request)


def _advance(reader: BlockingSessionReader, read: _Read) -> bool:
    """reader._advance, an unforeseen error the read's outcome (the loop serves the others)."""
    try:
        return reader._advance(read)
    except Exception as exc:  # noqa: BLE001
        reader._finish(read, _unexpected(exc))
        return True


def _unexpected(exc: Exception) -> ReadError:
    error = ReadError(f"{type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _settle(request: _Request, outcome: Any) -> None:
    """The awaiting future's result (or exception), set on its own loop."""

    def settle() -> None:
        if request.future.done():
            return
        if isinstance(outcome, BaseException):
            request.future.set_exception(outcome)
        else:
            request.future.set_result(outcome)

    try:
        request.loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the caller's loop is closed: nobody awaits it any more
        pass


__all__ = ["SessionReader"]
