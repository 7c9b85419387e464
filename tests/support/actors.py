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


def worker_deps(client: object, root_dir: str, **more):
    """Pod worker deps around a fake CRI `client` (attached as a runtime at a made-up
    endpoint), with fresh boards, back-offs and metrics; `more` sets any other field."""
    from prometheus_client import CollectorRegistry

    from pykubelet.actors.events import EventRecorder
    from pykubelet.actors.pod_statuses import PodStatuses
    from pykubelet.actors.pod_workers import NodeSettings, PodMetrics, PodWorkerDeps
    from pykubelet.actors.probes.results import ProbeResults
    from pykubelet.actors.runtime_link import RuntimeHandle
    from pykubelet.pods.backoff import CrashLoopBackOff
    from pykubelet.ports.cri import RuntimeVersion

    handle = RuntimeHandle("unix:///run/fake.sock")
    handle.attach(client, RuntimeVersion("fake", "1", "v1", "0.1.0"))
    return PodWorkerDeps(
        runtime=handle, statuses=PodStatuses(), crash_backoff=CrashLoopBackOff(), image_backoff=CrashLoopBackOff(),
        metrics=PodMetrics(CollectorRegistry()), events=EventRecorder(CollectorRegistry()),
        probe_results=ProbeResults(),
        node=NodeSettings(name="node1", host_ip="127.0.0.1", root_dir=root_dir, pod_logs_dir=f"{root_dir}/l"),
        **more,
    )
