"""Named mailboxes: back-pressure, deadlines, typed protocols, addresses."""

from __future__ import annotations

import contextlib
import random

import pytest
import trio

from pykubelet.supervisor import MailboxFull, MailboxSpec, MailboxTimeout, Registry, UnknownAddress


class Ping:
    pass


async def test_send_waits_while_full_and_resumes_when_the_reader_takes_one(autojump_clock):
    mailbox = Registry().open("root/a", MailboxSpec(capacity=2))
    mailbox.send_nowait(1)
    mailbox.send_nowait(2)
    sent_at = None

    async def sender():
        nonlocal sent_at
        await mailbox.send(3)
        sent_at = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        await trio.sleep(5)
        assert sent_at is None and mailbox.depth == 2
        assert await mailbox.receive() == 1
    assert sent_at == 5
    assert [mailbox.receive_nowait(), mailbox.receive_nowait()] == [2, 3]
    assert mailbox.received == 3


async def test_send_with_a_deadline_gives_up_naming_the_mailbox(autojump_clock):
    mailbox = Registry().open("root/sync-loop", MailboxSpec(capacity=1))
    await mailbox.send("x")
    with pytest.raises(MailboxTimeout, match=r"mailbox root/sync-loop stayed full \(1 messages\) for 2s"):
        await mailbox.send("y", timeout=2)
    assert trio.current_time() == 2
    with pytest.raises(MailboxFull, match="mailbox root/sync-loop is full"):
        mailbox.send_nowait("z")


async def test_a_message_outside_the_protocol_is_refused_at_the_sender():
    mailbox = Registry().open("root/a", MailboxSpec(accepts=(Ping,)))
    with pytest.raises(TypeError, match="mailbox root/a accepts Ping, not str"):
        mailbox.send_nowait("hello")
    mailbox.send_nowait(Ping())
    assert mailbox.depth == 1


def test_registry_keeps_one_mailbox_per_address_and_names_unknown_ones():
    registry = Registry()
    first = registry.open("root/a", MailboxSpec())
    assert registry.open("root/a", MailboxSpec()) is first
    assert registry.lookup("root/a") is first
    with pytest.raises(UnknownAddress, match=r"no mailbox at 'root/b' \(known addresses: root/a\)"):
        registry.lookup("root/b")


async def test_depth_is_what_the_channel_holds_through_cancelled_timed_out_and_refused_sends(autojump_clock):
    # depth skips the channel's statistics while every message offered has been taken out;
    # a random walk of every way in and out checks it against them.
    rng = random.Random(7)
    mailbox = Registry().open("root/a", MailboxSpec(capacity=3))

    def holds() -> int:
        return mailbox._send.statistics().current_buffer_used

    async with trio.open_nursery() as nursery:
        for step in range(600):
            action = rng.random()
            if action < 0.25:
                nursery.start_soon(mailbox.send, step)  # may wait while full
            elif action < 0.35:
                with trio.move_on_after(rng.choice([0, 1])):  # cancelled, queued or not
                    await mailbox.send(step)
            elif action < 0.45:
                with contextlib.suppress(MailboxTimeout):
                    await mailbox.send(step, timeout=rng.choice([0, 1]))
            elif action < 0.6:
                with contextlib.suppress(MailboxFull):
                    mailbox.send_nowait(step)
            elif action < 0.85:
                with contextlib.suppress(trio.WouldBlock):
                    mailbox.receive_nowait()
            elif action < 0.95:
                with trio.move_on_after(1):
                    await mailbox.receive()
            else:
                mailbox.discard_pending()
            await trio.sleep(rng.choice([0, 0, 2]))  # let waiting senders in
            assert mailbox.depth == holds(), step
        nursery.cancel_scope.cancel()
