"""Leak checks of the simulation: mailboxes that count what goes through them, the
registry's addresses against the tree's actors, and the process's file descriptors.

CountingMailbox stands in for supervisor.mailbox.Mailbox while a simulation runs (the
registry makes every mailbox). Each knows every message object sent to it and how often
each was received, so that a message delivered twice, or a message a durable mailbox
dropped, shows. The accounts are checked when a daemon stops: then nothing is in flight.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter

from pykubelet.supervisor import mailbox as mailbox_module
from pykubelet.supervisor.mailbox import Mailbox


class CountingMailbox(Mailbox):
    made: list[CountingMailbox] = []  # every mailbox of the current simulation, in order

    def __init__(self, address, spec) -> None:
        super().__init__(address, spec)
        self.sent = 0
        self.discarded = 0
        self._sent_ids: Counter[int] = Counter()
        self._received_ids: Counter[int] = Counter()
        self._keep: list[object] = []  # the messages themselves, so that an id is never reused
        CountingMailbox.made.append(self)

    def _count_sent(self, message: object) -> None:
        self.sent += 1
        self._sent_ids[id(message)] += 1
        self._keep.append(message)

    def _count_received(self, message: object) -> object:
        self._received_ids[id(message)] += 1
        return message

    async def send(self, message: object, *, timeout: float | None = None) -> None:
        await super().send(message, timeout=timeout)
        self._count_sent(message)

    def send_nowait(self, message: object) -> None:
        super().send_nowait(message)
        self._count_sent(message)

    async def receive(self):
        return self._count_received(await super().receive())

    def receive_nowait(self):
        return self._count_received(super().receive_nowait())

    def discard_pending(self) -> int:
        dropped = super().discard_pending()
        self.discarded += dropped
        return dropped

    def problems(self) -> list[str]:
        """What the accounts say went wrong (call when nothing is in flight)."""
        out = []
        if self.sent != self.received + self.discarded + self.depth:
            out.append(f"mailbox {self.address}: {self.sent} sent, but {self.received} received, "
                       f"{self.discarded} discarded and {self.depth} queued")
        twice = sum(1 for key, n in self._received_ids.items() if n > self._sent_ids[key])
        if twice:
            out.append(f"mailbox {self.address}: {twice} messages received more often than sent")
        if self.spec.durable and self.discarded:
            out.append(f"durable mailbox {self.address} discarded {self.discarded} messages")
        return out


@contextlib.contextmanager
def counting_mailboxes():
    saved = mailbox_module.Mailbox
    mailbox_module.Mailbox = CountingMailbox
    CountingMailbox.made = []
    try:
        yield
    finally:
        mailbox_module.Mailbox = saved
        CountingMailbox.made = []


def mailbox_problems() -> list[str]:
    """The accounts of every mailbox made so far; those checked are forgotten."""
    out = [p for m in CountingMailbox.made for p in m.problems()]
    CountingMailbox.made = []
    return out


def orphan_addresses(root) -> list[str]:
    """Registry addresses with no actor in the tree (a removed pod worker's mailbox kept)."""
    actors = set()

    def walk(snapshot) -> None:
        actors.add(snapshot.path)
        for child in snapshot.children:
            walk(child)

    walk(root.snapshot())
    return sorted(set(root.registry._mailboxes) - actors)


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def describe_fds(fds: set[int]) -> list[str]:
    out = []
    for fd in sorted(fds):
        try:
            out.append(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            out.append(f"{fd} (closed meanwhile)")
    return out
