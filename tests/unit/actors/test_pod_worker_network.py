"""Pod workers while the runtime's pod network is not ready, on the simulated runtime and
trio's virtual clock: a pod on the pod network waits (NetworkNotReady, one event per try,
tried again about every second), a hostNetwork pod starts, and the waiting pod starts as
soon as the runtime link sees NetworkReady turn true."""

from __future__ import annotations

import random

import msgspec
import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors import runtime_link as runtime_link_module
from pykubelet.actors.events import EventRecorder
from pykubelet.actors.health import HealthBoard
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.pod_workers import NodeSettings, PodMetrics, PodWorkerDeps, pod_worker_actor
from pykubelet.actors.probes import ProbeResults
from pykubelet.actors.runtime_link import RuntimeHandle, RuntimeLinkMetrics, RuntimeLinkSettings, runtime_link_actor
from pykubelet.actors.sync_loop import WORKER_MAILBOX
from pykubelet.messages.pod import Pod
from pykubelet.messages.pod_updates import SyncPod
from pykubelet.pods.backoff import CrashLoopBackOff
from pykubelet.ports.cri import RuntimeCondition
from pykubelet.supervisor import ChildSpec
from tests.simulation.runtime import ENDPOINT, EPOCH, SimRuntime
from tests.support.actors import running

CNI_NOT_READY = RuntimeCondition("NetworkReady", False, "NetworkPluginNotReady",
                                 "Network plugin returns error: cni plugin not initialized")  # fmt: skip
HELD = ("network is not ready: container runtime network not ready: NetworkReady=false "
        "reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized")  # fmt: skip
STATUS_PERIOD = 5.0  # the runtime link's Status poll (Go: updateRuntimeUp every 5s)


def pod(name: str, *, host_network: bool) -> Pod:
    return msgspec.convert({
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"hostNetwork": host_network, "containers": [
            {"name": "app", "image": "busybox:1", "command": ["sleep", "3600"], "imagePullPolicy": "IfNotPresent"}]},
    }, Pod)  # fmt: skip


async def inline_to_thread(fn, *args, **_):
    # A real thread would let the autojump clock move while it runs: timings would drift.
    await trio.lowlevel.checkpoint()
    return fn(*args)


class Node:
    def __init__(self, tmp_path, monkeypatch) -> None:
        self.runtime = SimRuntime(rng=random.Random(0), network=CNI_NOT_READY)
        monkeypatch.setattr(runtime_link_module, "CriClient", self.runtime.client_factory())
        monkeypatch.setattr(trio.to_thread, "run_sync", inline_to_thread)
        self.handle = RuntimeHandle(ENDPOINT)
        self.events = EventRecorder(CollectorRegistry(), clock=lambda: EPOCH + trio.current_time())
        self.deps = PodWorkerDeps(
            runtime=self.handle, statuses=PodStatuses(), crash_backoff=CrashLoopBackOff(),
            image_backoff=CrashLoopBackOff(), metrics=PodMetrics(CollectorRegistry()),
            node=NodeSettings(name="node1", host_ip="127.0.0.1", root_dir=str(tmp_path),
                              pod_logs_dir=str(tmp_path / "logs")),
            events=self.events, probe_results=ProbeResults(),
        )  # fmt: skip
        link = runtime_link_actor(RuntimeLinkSettings(endpoint=ENDPOINT, status_period=STATUS_PERIOD),
                                  health=HealthBoard(), metrics=RuntimeLinkMetrics(CollectorRegistry()),
                                  handle=self.handle)  # fmt: skip
        self.specs = [ChildSpec("runtime-link", link)]

    def worker(self, pod: Pod) -> None:
        uid = pod.metadata.uid
        self.specs.append(ChildSpec(uid, pod_worker_actor(uid, pod, self.deps), mailbox=WORKER_MAILBOX))

    def started(self, uid: str) -> bool:
        return bool(self.runtime.running(uid))

    def network_events(self, uid: str):
        return [e for e in self.events.events(involved_uid=uid) if e.reason == "NetworkNotReady"]


async def test_a_pod_network_pod_waits_for_the_network_and_a_host_network_pod_starts(
    autojump_clock, tmp_path, monkeypatch
):
    node = Node(tmp_path, monkeypatch)
    node.worker(pod("web", host_network=False))
    node.worker(pod("agent", host_network=True))
    async with running(*node.specs):
        await trio.sleep(20)
        assert node.started("uid-agent")
        assert node.deps.statuses.get("uid-agent").phase == "Running"
        # The pod-network pod got no sandbox: Pending, its container ContainerCreating.
        assert not node.runtime.holds("uid-web")
        status = node.deps.statuses.get("uid-web")
        assert status.phase == "Pending"
        (app,) = status.container_statuses
        assert app.state.waiting is not None and app.state.waiting.reason == "ContainerCreating"
        # One event per try, tried again every 1 to 1.5 s (Go: backOffOnTransientErrorPeriod, jittered).
        (event,) = node.network_events("uid-web")
        assert (event.type, event.message, event.involved_object.name) == ("Warning", HELD, "web")
        assert 20 / 1.5 <= event.count <= 20 / 1.0 + 1
        assert node.network_events("uid-agent") == []


async def test_the_waiting_pod_starts_within_a_status_poll_and_a_retry_of_network_ready(
    autojump_clock, tmp_path, monkeypatch
):
    node = Node(tmp_path, monkeypatch)
    node.worker(pod("web", host_network=False))
    async with running(*node.specs):
        await trio.sleep(12.3)
        assert not node.runtime.holds("uid-web")
        node.runtime.network = RuntimeCondition("NetworkReady", True)
        ready_at = trio.current_time()
        while not node.started("uid-web"):
            await trio.sleep(0.05)
        assert trio.current_time() - ready_at <= STATUS_PERIOD + 1.5 + 0.5  # the poll, a retry, the calls
        tries = node.network_events("uid-web")[0].count
        await trio.sleep(STATUS_PERIOD)
        assert node.deps.statuses.get("uid-web").phase == "Running"
        assert node.network_events("uid-web")[0].count == tries  # no more NetworkNotReady


async def test_a_running_pod_is_held_but_left_running_when_the_network_goes_away(
    autojump_clock, tmp_path, monkeypatch
):
    # Go returns before the runtime's SyncPod: nothing is killed, nothing is restarted.
    node = Node(tmp_path, monkeypatch)
    node.runtime.network = RuntimeCondition("NetworkReady", True)
    web = pod("web", host_network=False)
    node.worker(web)
    async with running(*node.specs) as tree:
        await trio.sleep(3)
        assert node.started("uid-web")
        node.runtime.network = CNI_NOT_READY
        await trio.sleep(STATUS_PERIOD + 1)
        assert node.started("uid-web")  # left running
        node.runtime.exit_container("uid-web", "app", 1)
        tree.registry.lookup("root/uid-web").send_nowait(SyncPod(pod=web))  # as the PLEG's event would
        await trio.sleep(30)
        assert not node.started("uid-web")  # not restarted while the network is not ready
        assert node.network_events("uid-web")[0].count >= 20
        assert len(node.runtime.sandbox_creations["uid-web"]) == 1
        node.runtime.network = RuntimeCondition("NetworkReady", True)
        await trio.sleep(STATUS_PERIOD + 1.5 + 0.5)
        assert node.started("uid-web")  # restarted in the same sandbox
        assert len(node.runtime.sandbox_creations["uid-web"]) == 1

