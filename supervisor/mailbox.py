"""Named, bounded mailboxes and the registry that finds them by actor path.

A mailbox belongs to an address (the actor's path), not to one incarnation of the actor:
the supervisor keeps it across restarts, so senders never need to look an actor up again.
A durable mailbox keeps queued messages for the next incarnation; a plain one is emptied
when a new incarnation starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio


class MailboxError(Exception):
    """Base of the mailbox errors; the message names the mailbox."""


class MailboxFull(MailboxError):
    pass


class MailboxTimeout(MailboxError):
    pass


class UnknownAddress(MailboxError):
    pass


@dataclass(frozen=True)
class MailboxSpec:
    """What kind of mailbox a child gets.

    accepts: the message types the actor's protocol is made of; anything else is refused
    at the sender with a TypeError, not discovered by the receiver.
    """

    capacity: int = 256
    durable: bool = False
    accepts: tuple[type, ...] | None = None


class Mailbox:
    """A bounded trio memory channel with an address and counters."""

    def __init__(self, address: str, spec: MailboxSpec) -> None:
        self.address = address
        self.spec = spec
        self._send, self._receive = trio.open_memory_channel[Any](spec.capacity)
        self.received = 0
        # Sends begun and not failed, and messages taken out (received or discarded): when
        # they are equal nothing can be queued, and depth needs no look at the channel
        # (asked for every actor at each tree snapshot and /metrics scrape).
        self._offered = 0
        self._taken = 0

    @property
    def capacity(self) -> int:
        return self.spec.capacity

    @property
    def depth(self) -> int:
        if self._offered == self._taken:
            return 0
        return self._send.statistics().current_buffer_used

    def _check(self, message: object) -> None:
        accepts = self.spec.accepts
        if accepts is not None and not isinstance(message, accepts):
            names = ", ".join(t.__name__ for t in accepts)
            raise TypeError(
                f"mailbox {self.address} accepts {names}, not {type(message).__name__}"
            )

    async def send(self, message: object, *, timeout: float | None = None) -> None:
        """Queue a message, waiting while the mailbox is full (back-pressure).

        With a timeout, give up after that many seconds with MailboxTimeout.
        """
        self._check(message)
        self._offered += 1
        try:
            if timeout is None:
                await self._send.send(message)
                return
            with trio.move_on_after(timeout):
                await self._send.send(message)
                return
        except BaseException:
            self._offered -= 1  # trio queues nothing from a send that raised
            raise
        self._offered -= 1
        raise MailboxTimeout(
            f"mailbox {self.address} stayed full ({self.capacity} messages) for {timeout:g}s"
        )

    def send_nowait(self, message: object) -> None:
        self._check(message)
        try:
            self._send.send_nowait(message)
        except trio.WouldBlock:
            raise MailboxFull(
                f"mailbox {self.address} is full ({self.capacity} messages)"
            ) from None
        self._offered += 1

    async def receive(self) -> Any:
        message = await self._receive.receive()
        self.received += 1
        self._taken += 1
        return message

    def receive_nowait(self) -> Any:
        message = self._receive.receive_nowait()
        self.received += 1
        self._taken += 1
        return message

    def __aiter__(self):
        return self

    async def __anext__(self) -> Any:
        return await self.receive()

    def discard_pending(self) -> int:
        """Drop what is queued; used when a non-durable mailbox gets a new incarnation."""
        dropped = 0
        while True:
            try:
                self._receive.receive_nowait()
            except trio.WouldBlock:
                return dropped
            dropped += 1
            self._taken += 1


class Registry:
    """Address book of the tree: actor path -> mailbox."""

    def __init__(self) -> None:
        self._mailboxes: dict[str, Mailbox] = {}

    def open(self, address: str, spec: MailboxSpec) -> Mailbox:
        """The mailbox at this address, created on first use and kept afterwards."""
        mailbox = self._mailboxes.get(address)
        if mailbox is None:
            mailbox = self._mailboxes[address] = Mailbox(address, spec)
        return mailbox

    def close(self, address: str) -> None:
        self._mailboxes.pop(address, None)

    def lookup(self, address: str) -> Mailbox:
        try:
            return self._mailboxes[address]
        except KeyError:
            known = ", ".join(sorted(self._mailboxes)) or "none"
            raise UnknownAddress(
                f"no mailbox at {address!r} (known addresses: {known})"
            ) from None

    def __contains__(self, address: str) -> bool:
        return address in self._mailboxes

