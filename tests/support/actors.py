"""Helpers for testing actors in a real supervision tree."""

from __future__ import annotations

from contextlib import asynccontextmanager

import trio

from pykubelet.supervisor import ChildSpec, MailboxSpec, Supervisor


class Inbox:
    """A fake actor that records what arrives in its mailbox, with the trio time."""

    def __init__(self) -> None:
        self.messages: list[object] = []
        self.times: list[float] = []

    async def run(self, ctx) -> None:
        async for message in ctx.mailbox:
            self.messages.append(message)
            self.times.append(trio.current_time())

    def take(self) -> list[object]:
        messages, self.messages, self.times = self.messages, [], []
        return messages

    def spec(self, name: str) -> ChildSpec:
        return ChildSpec(name, self.run, mailbox=MailboxSpec(capacity=256, durable=True))


@asynccontextmanager
async def running(*children: ChildSpec):
    """A rest_for_one root of these children, running for the block."""
    tree = Supervisor("root", list(children), strategy="rest_for_one")
    async with trio.open_nursery() as nursery:
        await nursery.start(tree.run)
        yield tree
        nursery.cancel_scope.cancel()
