"""PLEG benchmark: how long after a container exits the sync loop hears of it, with the
runtime's container events (CRI GetContainerEvents) against relisting alone.

    python bench/pleg_events.py [--samples N] [--concurrency N] [--containerd]

Containers exit on their own (`sleep <random 0.2-1.2 s>; exit 0`, so the exits fall at
every phase of the relist tick), a few at a time in one managed pod sandbox. The delay of
one sample runs from the exit as the runtime recorded it (ContainerStatus.finished_at) to
the ContainerDied PlegEvent reaching a mailbox that stands in for the sync loop (both on
the wall clock of this machine). The PLEG runs as the daemon runs it (relist every 1 s;
every 10 s while events flow); "relist only" switches its event subscription off.

Runs on the embedded runtime (started privately under /tmp). --containerd also starts a
private containerd (tests/support/containerd.py: root, containerd, runc, busybox-static,
gcc) and measures it the same way; containerd 1.6 offers no events (UNIMPLEMENTED), so
there it measures the relist alone and says so. containerd's figures include its own exit
handling (the shim's task delete before the container reads EXITED), which grows with
the number of containers exiting together.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio
from cri_api.v1 import api_pb2
from prometheus_client import CollectorRegistry

from pykubelet.actors.health import HealthBoard
from pykubelet.actors.pleg import PlegMetrics, PlegSettings, RuntimePods, pleg_actor
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.embedded_runtime import launcher
from pykubelet.messages.pod_updates import PlegEvent
from pykubelet.pods.labels import CONTAINER_NAME_LABEL, MANAGED_LABEL, POD_NAME_LABEL, POD_UID_LABEL
from pykubelet.ports.cri import CriClient, EventsUnsupported
from pykubelet.supervisor import ChildSpec, MailboxSpec, Supervisor


class SyncLoopStandIn:
    """Notes the wall-clock time each ContainerDied arrives, by container id."""

    def __init__(self) -> None:
        self.died: dict[str, float] = {}
        self.changed = trio.Event()

    async def run(self, ctx) -> None:
        async for message in ctx.mailbox:
            if isinstance(message, PlegEvent) and message.type == "ContainerDied":
                self.died.setdefault(message.container_id, time.time())
                self.changed.set()
                self.changed = trio.Event()

    async def wait_died(self, container_ids: list[str], within: float) -> None:
        with trio.fail_after(within):
            while not all(cid in self.died for cid in container_ids):
                await self.changed.wait()


class Bench:
    def __init__(self, cri: CriClient, image: str) -> None:
        self.cri = cri
        self.image = image
        self.uid = str(uuid.uuid4())
        self.labels = {POD_NAME_LABEL: "pleg-bench", POD_UID_LABEL: self.uid, MANAGED_LABEL: "true"}
        self.sandbox_config = api_pb2.PodSandboxConfig(
            metadata=api_pb2.PodSandboxMetadata(name="pleg-bench", namespace="default", uid=self.uid),
            labels=self.labels,
            linux=api_pb2.LinuxPodSandboxConfig(
                security_context=api_pb2.LinuxSandboxSecurityContext(
                    namespace_options=api_pb2.NamespaceOption(network=api_pb2.NODE)
                )
            ),
        )
        self.sandbox_id = ""
        self.count = 0

    async def start_exiting_container(self) -> str:
        self.count += 1
        name = f"exits-{self.count}"
        config = api_pb2.ContainerConfig(
            metadata=api_pb2.ContainerMetadata(name=name),
            image=api_pb2.ImageSpec(image=self.image),
            command=["sh", "-c", f"sleep {random.uniform(0.2, 1.2):.3f}; exit 0"],
            labels={**self.labels, CONTAINER_NAME_LABEL: name},
        )
        container_id = await self.cri.create_container(self.sandbox_id, config, self.sandbox_config)
        await self.cri.start_container(container_id)
        return container_id

    async def measure(self, events: bool, samples: int, concurrency: int) -> tuple[list[float], int]:
        """(delays in seconds, events the PLEG received from the runtime)."""
        handle = RuntimeHandle(self.cri.endpoint)
        handle.attach(self.cri, self.cri.runtime_version)
        inbox = SyncLoopStandIn()
        registry = CollectorRegistry()
        metrics = PlegMetrics(registry)
        settings = PlegSettings(container_events=events, send_to="bench/sync-loop")
        tree = Supervisor("bench", [
            ChildSpec("sync-loop", inbox.run, mailbox=MailboxSpec(capacity=1024)),
            ChildSpec("pleg", pleg_actor(settings, runtime=handle, health=HealthBoard(), metrics=metrics,
                                         cache=RuntimePods())),
        ])
        delays: list[float] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(tree.run)
            self.sandbox_id = await self.cri.run_pod_sandbox(self.sandbox_config)
            await trio.sleep(1.5)  # the first relist, and the event stream settled
            while len(delays) < samples:
                batch = [await self.start_exiting_container() for _ in range(min(concurrency, samples - len(delays)))]
                await inbox.wait_died(batch, within=30)
                for container_id in batch:
                    finished_at = (await self.cri.container_status(container_id)).status.finished_at / 1e9
                    delays.append(inbox.died[container_id] - finished_at)
                    await self.cri.remove_container(container_id)
            await self.cri.stop_pod_sandbox(self.sandbox_id)
            await self.cri.remove_pod_sandbox(self.sandbox_id)
            nursery.cancel_scope.cancel()
        received = registry.get_sample_value("kubelet_evented_pleg_connection_latency_seconds_count")
        return delays, int(received or 0)


def figures(samples: list[float]) -> tuple[str, float, float]:
    ordered = sorted(samples)
    p50, p99 = statistics.median(ordered), ordered[math.ceil(0.99 * len(ordered)) - 1]
    ms = lambda seconds: f"{seconds * 1000:8.1f} ms"  # noqa: E731
    return f"p50 {ms(p50)}  p99 {ms(p99)}  max {ms(ordered[-1])}", p50, p99


async def offers_events(cri: CriClient) -> str | None:
    """None when the runtime streams container events, else its answer."""
    try:
        with trio.move_on_after(0.5):
            async with contextlib.aclosing(cri.container_events()) as events:
                async for _ in events:
                    break
    except EventsUnsupported as unsupported:
        return f"GetContainerEvents: {unsupported.code}: {unsupported.detail}"
    return None


async def run_against(endpoint: str, image: str, args: argparse.Namespace) -> None:
    async with CriClient(endpoint, request_timeout=30) as cri:
        version = cri.runtime_version
        print(f"{version.runtime_name} {version.runtime_version}: {args.samples} exits, "
              f"{args.concurrency} at a time, exit (finished_at) -> ContainerDied in the mailbox")
        bench = Bench(cri, image)
        refusal = await offers_events(cri)
        if refusal is None:
            evented, received = await bench.measure(True, args.samples, args.concurrency)
        relisted, _ = await bench.measure(False, args.samples, args.concurrency)
    line, relist_p50, relist_p99 = figures(relisted)
    if refusal is not None:
        print(f"  no events ({refusal}): the PLEG relists every 1 s")
        print(f"  relist only      {line}")
        return
    line_events, events_p50, events_p99 = figures(evented)
    print(f"  events + relist  {line_events}   ({received} runtime events received)")
    print(f"  relist only      {line}   (the baseline: relist every 1 s)")
    print(f"  relist only / events: p50 {relist_p50 / events_p50:.0f}x, p99 {relist_p99 / events_p99:.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--containerd", action="store_true", help="also measure a private containerd")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    root = tempfile.mkdtemp(prefix="pykb-pleg-", dir="/tmp")  # short: unix socket paths <= 108 bytes
    try:
        endpoint = launcher.ensure_running(root)
        trio.run(run_against, endpoint, "busybox", args)
    finally:
        launcher.stop(root)
        shutil.rmtree(root, ignore_errors=True)

    if args.containerd:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's tests/
        from tests.support.containerd import BUSYBOX_IMAGE, PrivateContainerd, build_and_import_images

        containerd = PrivateContainerd()
        try:
            containerd.start()
            build_and_import_images(containerd)
            trio.run(run_against, containerd.endpoint, BUSYBOX_IMAGE, args)
        finally:
            containerd.stop()


if __name__ == "__main__":
    main()
