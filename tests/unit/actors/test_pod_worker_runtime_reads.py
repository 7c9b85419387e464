"""When a pod worker's sync reads its pod from the runtime and when the PLEG's view spares
the read (Go: the pod workers' GetNewerThan on the pod cache): a sync with a relist newer
than the last sync that shows the pod unchanged makes no CRI call; a sync right after the
worker's own change, one whose latest relist is not newer than the last sync, and one whose
relist shows the pod changed read the runtime. On the simulated runtime, virtual clock."""

from __future__ import annotations

import random
from collections import Counter

import msgspec
import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors.events import EventRecorder
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.pod_workers import NodeSettings, PodMetrics, PodWorkerDeps
from pykubelet.actors.pod_workers.worker import PodWorker
from pykubelet.actors.probes import ProbeResults
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.actors.runtime_pods import RuntimePods
from pykubelet.messages.pod import Pod
from pykubelet.pods.backoff import CrashLoopBackOff
from pykubelet.ports.cri.pods import relist
from tests.simulation.runtime import ENDPOINT, SimRuntime

UID = "uid-web"


class CountingCri:
    """Passes every call through to the runtime and counts them by operation."""

    def __init__(self, cri) -> None:
        self.cri = cri
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name):
        attribute = getattr(self.cri, name)
        if not callable(attribute):
            return attribute

        async def counted(*args, **kwargs):
            self.calls[name] += 1
            return await attribute(*args, **kwargs)

        return counted


async def inline_to_thread(fn, *args, **_):
    await trio.lowlevel.checkpoint()  # a real thread would let the autojump clock move under it
    return fn(*args)


class Node:
    def __init__(self, tmp_path, monkeypatch) -> None:
        monkeypatch.setattr(trio.to_thread, "run_sync", inline_to_thread)
        self.runtime = SimRuntime(rng=random.Random(0))
        self.view = RuntimePods()
        self.tmp_path = tmp_path

    async def start(self, restart_policy: str = "Always") -> PodWorker:
        client = self.runtime.client_factory()(ENDPOINT)
        version = await client.connect()
        self.cri = CountingCri(client)
        handle = RuntimeHandle(ENDPOINT)
        handle.attach(self.cri, version)
        deps = PodWorkerDeps(
            runtime=handle, statuses=PodStatuses(), crash_backoff=CrashLoopBackOff(),
            image_backoff=CrashLoopBackOff(), metrics=PodMetrics(CollectorRegistry()),
            events=EventRecorder(CollectorRegistry()), probe_results=ProbeResults(), runtime_pods=self.view,
            node=NodeSettings(name="node1", host_ip="127.0.0.1", root_dir=str(self.tmp_path),
                              pod_logs_dir=str(self.tmp_path / "logs")),
        )  # fmt: skip
        pod = msgspec.convert({
            "metadata": {"name": "web", "namespace": "default", "uid": UID},
            "spec": {"hostNetwork": True, "restartPolicy": restart_policy, "containers": [
                {"name": "app", "image": "busybox:1", "command": ["sleep", "3600"], "imagePullPolicy": "IfNotPresent"}]},
        }, Pod)  # fmt: skip
        self.worker = PodWorker(UID, pod, deps)
        self.statuses = deps.statuses
        return self.worker

    async def relist(self, *, began: float | None = None) -> None:
        """A PLEG relist whose list calls began at `began` (default: a second from now,
        after anything before), then a second more."""
        await trio.sleep(1)
        began = trio.current_time() if began is None else began
        self.view.relisted(await relist(self.cri.cri), began)
        await trio.sleep(1)

    async def sync(self) -> Counter[str]:
        """One sync; the CRI calls it made."""
        self.cri.calls.clear()
        await self.worker.sync()
        return +self.cri.calls

    def app(self):
        (app,) = self.statuses.get(UID).container_statuses
        return app


STATUS_READS = {"list_pod_sandbox", "list_containers", "pod_sandbox_status", "container_status"}


async def test_a_resync_with_a_newer_relist_showing_the_pod_unchanged_makes_no_cri_call(
    autojump_clock, tmp_path, monkeypatch
):
    node = Node(tmp_path, monkeypatch)
    await node.start()
    started = await node.sync()
    assert started["start_container"] == 1
    assert node.statuses.get(UID).phase == "Running"
    await trio.sleep(60)  # a resync later, the PLEG relisting meanwhile
    await node.relist()
    assert await node.sync() == Counter()
    assert node.statuses.get(UID).phase == "Running" and node.app().state.running is not None
    await trio.sleep(60)
    await node.relist()
    assert await node.sync() == Counter()  # each resync, as long as the relists show no change


async def test_a_sync_right_after_the_workers_own_change_reads_the_runtime(autojump_clock, tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    await node.start()
    began = trio.current_time()
    await node.sync()  # creates the sandbox and starts the container
    # A relist whose list calls began during that sync (as the one whose ContainerStarted
    # wakes the worker at once), though it already shows what the sync made.
    await node.relist(began=began)
    calls = await node.sync()
    assert {"list_pod_sandbox", "list_containers", "container_status"} <= calls.keys()
    await node.relist()  # the next relist began after that sync ended: it may stand for a read
    assert await node.sync() == Counter()


async def test_a_sync_right_after_the_worker_stopped_something_reads_the_runtime(
    autojump_clock, tmp_path, monkeypatch
):
    # A change that creates nothing (so no creation mark covers it): the sandbox of a pod
    # whose only container ended, restartPolicy Never, is stopped.
    node = Node(tmp_path, monkeypatch)
    await node.start(restart_policy="Never")
    await node.sync()
    node.runtime.exit_container(UID, "app", 0)
    await node.relist()
    began = trio.current_time()
    calls = await node.sync()
    assert calls["stop_pod_sandbox"] == 1 and calls["list_pod_sandbox"] == 2  # read, stop, read again
    await node.relist(began=began)  # began during that sync, showing the sandbox stopped already
    calls = await node.sync()
    # Read before deciding; the pod is finished and stopped by this worker already: no stop
    # again (Go syncs a terminated pod no more), so nothing changed and nothing is read after.
    assert calls == Counter({"list_pod_sandbox": 1, "list_containers": 1, "container_status": 1})
    await trio.sleep(60)
    await node.relist()
    assert await node.sync() == Counter()  # a resync of the finished pod: no CRI call at all
    assert node.statuses.get(UID).phase == "Succeeded"


async def test_a_relist_no_newer_than_the_last_sync_is_not_used(autojump_clock, tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    await node.start()
    await node.sync()
    await node.relist()
    assert await node.sync() == Counter()  # from the relist: nothing changed, nothing done
    await trio.sleep(30)
    # No relist since that sync ended (the runtime cannot be listed, the PLEG is behind):
    # the relist that served it is older than it, and the next sync reads the runtime.
    calls = await node.sync()
    assert calls.keys() == STATUS_READS
    await node.relist(began=trio.current_time() - 30)  # one whose list calls began before that sync
    assert (await node.sync()).keys() == STATUS_READS


async def test_a_relist_showing_the_pod_changed_forces_a_fresh_read(autojump_clock, tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    await node.start(restart_policy="Never")
    await node.sync()
    await node.relist()
    assert await node.sync() == Counter()
    node.runtime.exit_container(UID, "app", 3)
    await node.relist()  # shows the container exited
    calls = await node.sync()
    assert {"list_pod_sandbox", "list_containers", "container_status"} <= calls.keys()
    # What only the status call says, the exit code and reason, is in the pod's status.
    terminated = node.app().state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    assert node.statuses.get(UID).phase == "Failed"


async def test_a_container_removed_since_the_last_read_forces_a_fresh_read(autojump_clock, tmp_path, monkeypatch):
    # A change that is no state transition: an exited container is gone (the GC removed it).
    node = Node(tmp_path, monkeypatch)
    await node.start()
    await node.sync()
    (first,) = node.runtime.running(UID)["app"]
    node.runtime.exit_container(UID, "app", 1)
    await node.relist()
    assert (await node.sync())["start_container"] == 1  # reads the exit, restarts the container
    await node.relist()
    assert await node.sync() == Counter()
    assert node.app().restart_count == 1 and node.app().last_state.terminated.exit_code == 1
    await node.cri.cri.remove_container(first)
    await node.relist()
    assert (await node.sync()).keys() == STATUS_READS
