"""The simulation's leak checks (leaks.py) can fail: mailbox accounts, registry addresses
without an actor, file descriptors left open by a run."""

from __future__ import annotations

import os

from pykubelet.supervisor import MailboxSpec, Supervisor

from .harness import run_schedule
from .leaks import CountingMailbox, counting_mailboxes, mailbox_problems, orphan_addresses
from .schedule import ContainerSpec, PodSpec, Schedule, Step


async def test_a_durable_mailbox_that_drops_messages_is_caught(autojump_clock):
    with counting_mailboxes():
        durable = CountingMailbox("root/status-manager", MailboxSpec(capacity=8, durable=True))
        plain = CountingMailbox("root/pleg", MailboxSpec(capacity=8))
        for box in (durable, plain):
            await box.send("a")
            box.send_nowait("b")
            assert await box.receive() == "a"
        assert durable.problems() == plain.problems() == []  # b is still queued in each: accounted for
        durable.discard_pending()
        plain.discard_pending()  # a plain mailbox may drop what a dead incarnation left
        assert mailbox_problems() == ["durable mailbox root/status-manager discarded 1 messages"]


async def test_a_message_received_more_often_than_sent_is_caught(autojump_clock):
    with counting_mailboxes():
        box = CountingMailbox("root/sync-loop", MailboxSpec(capacity=8, durable=True))
        message = object()
        box.send_nowait(message)
        box._count_received(box.receive_nowait())
        box._count_received(message)  # as a mailbox that handed the same entry out twice would
        assert any("received more often than sent" in p for p in mailbox_problems())


async def test_a_registry_address_without_an_actor_is_an_orphan(autojump_clock):
    tree = Supervisor("root", [])
    tree.registry.open("root/pod-workers/gone", MailboxSpec())
    assert orphan_addresses(tree) == ["root/pod-workers/gone"]


def test_a_file_descriptor_left_open_by_a_run_is_caught(monkeypatch):
    from . import harness

    kept = []
    original = harness._Harness._write

    def write_and_keep_open(self, spec):
        kept.append(open(os.devnull))  # noqa: SIM115 - the leak under test
        return original(self, spec)

    monkeypatch.setattr(harness._Harness, "_write", write_and_keep_open)
    result = run_schedule(Schedule(seed=9, steps=(Step(1.0, "add", pod=PodSpec("web", (ContainerSpec("main"),))),),
                                   faults_end=1.0))
    for f in kept:
        f.close()
    assert any("file descriptors left open after the run" in v and "/dev/null" in v for v in result.violations), \
        result.violations
