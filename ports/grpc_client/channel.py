"""Calls to one gRPC server on a unix socket, from trio tasks: unary calls (alone or several
at once) and server streams, over one HTTP/2 connection at a time.

A call that finds no usable connection (none yet, the server restarted, or it sent GOAWAY)
opens a new one; a connect that fails fails the call at once with UNAVAILABLE, as grpcio's
calls without wait_for_ready do, so callers keep their own back-off. Each call has a
deadline (DEADLINE_EXCEEDED past it, the server told with RST_STREAM and grpc-timeout);
a cancelled trio task cancels its call in the server at once.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence

import trio

from .call import Call
from .connection import Connection
from .status import RpcError


class Channel:
    def __init__(
        self, path: str, *, max_message: int, user_agent: bytes = b"pykubelet", authority: bytes = b"localhost"
    ) -> None:
        self.path = path
        self.max_message = max_message
        self._user_agent = user_agent
        self._authority = authority
        self._connection: Connection | None = None
        self._draining: list[Connection] = []  # replaced, still finishing their calls
        self._closed = False

    def close(self) -> None:
        """Calls in flight (on every connection) and every call after it fail with
        UNAVAILABLE. Idempotent."""
        self._closed = True
        connections = [self._connection, *self._draining]
        self._connection = None
        self._draining = []
        for connection in connections:
            if connection is not None:
                connection.close()

    async def _usable(self) -> Connection:
        try:
            if self._closed:
                raise RpcError("UNAVAILABLE", "the connection was closed", connected=False)
            connection = self._connection
            if connection is None or not connection.usable:
                self._draining = [c for c in self._draining if not c.closed.is_set()]
                if connection is not None and not connection.closed.is_set():
                    self._draining.append(connection)
                connection = self._connection = Connection.open(
                    self.path, authority=self._authority, max_message=self.max_message, user_agent=self._user_agent
                )
            return connection
        except RpcError:
            await trio.lowlevel.checkpoint()  # a caller that tries again at once stays cancellable
            raise

    async def unary(self, method: bytes, request: bytes, timeout: float | None) -> bytes:
        """The answer's message to `request` (serialized), or RpcError. A call the server
        never processed (past its GOAWAY, refused) is made once more on a new connection,
        as grpcio's transparent retry does."""
        deadline = _deadline(timeout)
        try:
            return await unary(await self._usable(), method, request, timeout)
        except RpcError as error:
            if not error.retryable or trio.current_time() >= deadline:
                raise
        return await unary(await self._usable(), method, request, _remaining(deadline))

    async def unary_all(
        self, calls: Sequence[tuple[bytes, bytes]], timeout: float | None
    ) -> list[bytes | RpcError]:
        """Several unary calls in flight at once under one deadline: each answer or each
        call's RpcError, in order (one failing does not end the others). Each call gets
        what is left of the batch's time when it starts, so the connection's watcher fails
        them all at the batch's deadline, as it fails a call made alone."""
        deadline = _deadline(timeout)
        connection = await self._usable()
        started: list[Call | RpcError] = []
        try:
            for method, request in calls:
                try:
                    started.append(await connection.start(method, request, _remaining(deadline)))
                except RpcError as error:
                    started.append(error)
            for call in started:
                while isinstance(call, Call) and not call.ended:
                    await connection.wait(call)
        except BaseException:  # cancelled: none stays in the server
            for call in started:
                if isinstance(call, Call):
                    connection.cancel(call)
            raise
        results: list[bytes | RpcError] = []
        for call in started:
            if isinstance(call, RpcError):
                results.append(call)
                continue
            try:
                results.append(_answer(call))
            except RpcError as error:
                results.append(error)
        for i, result in enumerate(results):
            if isinstance(result, RpcError) and result.retryable and trio.current_time() < deadline:
                try:  # never processed: once more, on the channel's usable connection
                    results[i] = await unary(await self._usable(), calls[i][0], calls[i][1], _remaining(deadline))
                except RpcError as error:
                    results[i] = error
        return results

    async def stream(self, method: bytes, request: bytes) -> AsyncIterator[bytes]:
        """A server stream's messages as they come, until the server ends it (an RpcError
        unless its status is OK). No deadline; leaving the iteration cancels the call. The
        server sends more as the messages are taken (flow control)."""
        connection = await self._usable()
        call = await connection.start(method, request, None, streaming=True)
        try:
            while True:
                if call.messages:
                    yield connection.take_message(call)
                elif call.ended:
                    _raise_unless_ok(call)
                    return
                else:
                    await connection.wait(call)
        finally:
            connection.cancel(call)


async def unary(connection: Connection, method: bytes, request: bytes, timeout: float | None) -> bytes:
    """One unary call on `connection`: the answer's message, or RpcError (past its
    deadline DEADLINE_EXCEEDED, from the connection's watcher)."""
    call = await connection.start(method, request, timeout)
    while not call.ended:
        await connection.wait(call)
    return _answer(call)


def _remaining(deadline: float) -> float | None:
    return None if deadline == math.inf else max(deadline - trio.current_time(), 0.0)


def _deadline(timeout: float | None) -> float:
    return math.inf if timeout is None else trio.current_time() + timeout


def _raise_unless_ok(call: Call) -> None:
    if call.error is not None:
        raise call.error
    if call.code != "OK":
        raise RpcError(call.code or "UNKNOWN", call.details, connected=True)


def _answer(call: Call) -> bytes:
    _raise_unless_ok(call)
    if len(call.messages) != 1:
        raise RpcError("INTERNAL", f"a unary call answered with {len(call.messages)} messages", connected=True)
    return call.messages[0]
