"""One gRPC call's stream as the client sees it: the answer's messages put together from
DATA frames, and how the call ended."""

from __future__ import annotations

import math

import trio

from .status import RpcError


class Call:
    """One stream: the request sent, the answer's messages as they come, its status at the
    end. The connection's reader fills it in; its one caller waits until it changes (a task
    rescheduled directly: a call has one waiter at a time, so it needs no parking lot)."""

    __slots__ = ("id", "send_window", "waiter", "headers", "http_status", "messages", "partial",
                 "code", "details", "error", "unacked", "max_message", "cancelled", "streaming", "reset",
                 "deadline")

    def __init__(self, max_message: int, streaming: bool) -> None:
        self.id = 0
        self.streaming = streaming  # its caller wakes for each message, not only at the end
        self.send_window = 0
        self.waiter: trio.lowlevel.Task | None = None  # the caller, while it waits
        self.headers = False  # the response headers came
        self.http_status = 0
        self.messages: list[bytes] = []
        self.partial = bytearray()
        self.code: str | None = None  # set when the call ended
        self.details = ""
        self.error: RpcError | None = None
        self.unacked = 0
        self.max_message = max_message
        self.cancelled = False  # by the caller (or its deadline), not by the server
        self.reset = False  # a RST_STREAM went either way: no more frames for it
        self.deadline = math.inf  # on trio's clock: past it, the connection's watcher fails the call

    @property
    def ended(self) -> bool:
        return self.code is not None or self.error is not None

    def take_data(self, payload: bytes) -> None:
        """The messages in a DATA frame's payload. A unary call takes one message: a second
        is _TooMany (grpcio refuses it too), so nothing a server sends piles up here."""
        if not self.partial and len(payload) >= 5 and payload[0] == 0:
            # The usual case: one DATA frame is one whole message.
            length = int.from_bytes(payload[1:5], "big")
            if length == len(payload) - 5:
                if length > self.max_message:
                    raise MessageTooLarge(length)
                self._append(payload[5:])
                return
        self.partial += payload
        while len(self.partial) >= 5:
            if self.partial[0] != 0:
                raise CompressedMessage()
            length = int.from_bytes(self.partial[1:5], "big")
            if length > self.max_message:
                raise MessageTooLarge(length)
            if len(self.partial) < 5 + length:
                return
            self._append(bytes(self.partial[5:5 + length]))
            del self.partial[:5 + length]

    def _append(self, message: bytes) -> None:
        if self.messages and not self.streaming:
            raise TooManyMessages()
        self.messages.append(message)

    def end(self, code: str, details: str) -> None:
        if not self.ended:
            self.code, self.details = code, details
        self.wake()

    def fail(self, error: RpcError) -> None:
        if not self.ended:
            self.error = error
        self.wake()

    async def changed(self) -> None:
        """Wait until the reader wakes this call's caller (wake()); cancelled meanwhile,
        the caller stops waiting and nothing wakes it later."""
        self.waiter = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort_wait)

    def _abort_wait(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self.waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    def wake(self) -> None:
        task, self.waiter = self.waiter, None
        if task is not None:  # at most once a wait: trio refuses a second reschedule
            trio.lowlevel.reschedule(task)


class MessageTooLarge(Exception):
    def __init__(self, length: int) -> None:
        self.length = length


class CompressedMessage(Exception):
    pass


class TooManyMessages(Exception):
    pass
