"""A pod worker driven directly against a private containerd: what changes when the spec of
a running pod changes (an API pod's UPDATE keeps its UID, unlike a static pod's edit)."""

from __future__ import annotations

import dataclasses
import uuid

import msgspec
import pytest
import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors.events import EventRecorder
from pykubelet.actors.pleg import RuntimePods
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.probes import ProbeResults
from pykubelet.actors.pod_workers import NodeSettings, PodMetrics, PodWorkerDeps
from pykubelet.actors.pod_workers.worker import PodWorker
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.messages.pod import Pod
from pykubelet.messages.pod_updates import TerminatePod
from pykubelet.messages.pod_status_reports import PodStatusChanged
from tests.support.actors import Inbox, running
from pykubelet.pods.backoff import CrashLoopBackOff
from pykubelet.ports.cri.pods import read_pod_status, relist
from tests.support.containerd import BUSYBOX_IMAGE
from tests.support.pods import TRAPPING_LOOP

OTHER_IMAGE = "localhost/pykubelet/busybox:other"


def running_pod(uid: str) -> Pod:
    containers = [
        {"name": name, "image": BUSYBOX_IMAGE, "command": TRAPPING_LOOP, "imagePullPolicy": "IfNotPresent"}
        for name in ("a", "b")
    ]
    return msgspec.convert(
        {
            "metadata": {"name": f"update-{uid[:8]}", "namespace": "default", "uid": uid},
            "spec": {
                "hostNetwork": True,
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 2,
                "containers": containers,
            },
        },
        Pod,
    )


async def running_ids(worker: PodWorker, uid: str) -> dict[str, str]:
    with trio.fail_after(30):
        while True:
            await worker.sync()
            status = await read_pod_status(worker.deps.runtime.client, uid)
            running = {c.name: c.id for c in status.containers if c.state == "running"}
            if set(running) == {"a", "b"}:
                return running
            await trio.sleep(0.2)


async def worker_deps(cri, containerd, tmp_path) -> PodWorkerDeps:
    handle = RuntimeHandle(containerd.endpoint)
    handle.observe_network(await cri.status())  # as the runtime link does, before it attaches
    handle.attach(cri, await cri.version())
    return PodWorkerDeps(
        runtime=handle,
        statuses=PodStatuses(),
        crash_backoff=CrashLoopBackOff(),
        image_backoff=CrashLoopBackOff(),
        metrics=PodMetrics(CollectorRegistry()),
        node=NodeSettings(name="node1", host_ip="127.0.0.1", root_dir=str(tmp_path), pod_logs_dir=str(tmp_path / "logs")),
        events=EventRecorder(CollectorRegistry()),
        probe_results=ProbeResults(),
    )


@pytest.mark.containerd
async def test_changed_image_recreates_only_that_container(cri, containerd, tmp_path):
    containerd.ctr("images", "tag", "--force", BUSYBOX_IMAGE, OTHER_IMAGE)
    deps = await worker_deps(cri, containerd, tmp_path)
    uid = str(uuid.uuid4())
    pod = running_pod(uid)
    worker = PodWorker(uid, pod, deps)
    try:
        before = await running_ids(worker, uid)
        changed = msgspec.structs.replace(
            pod,
            spec=msgspec.structs.replace(
                pod.spec, containers=[pod.spec.containers[0], msgspec.structs.replace(pod.spec.containers[1], image=OTHER_IMAGE)]
            ),
        )
        worker.pod = changed
        after = await running_ids(worker, uid)
        assert after["a"] == before["a"]
        assert after["b"] != before["b"]
        status = deps.statuses.get(uid)
        b = next(s for s in status.container_statuses if s.name == "b")
        assert b.image == OTHER_IMAGE and b.restart_count == 1
        reasons = [(e.involved_object.field_path, e.reason) for e in deps.events.events()]
        assert ("spec.containers{b}", "Killing") in reasons
        assert reasons.count(("spec.containers{b}", "Started")) == 1  # counted: one event, count 2
        assert next(e for e in deps.events.events() if e.reason == "Started" and "{b}" in e.involved_object.field_path).count == 2
    finally:
        await worker.terminate(TerminatePod(reason="test over"))
    assert (await read_pod_status(cri, uid)).containers == []


@pytest.mark.containerd
async def test_each_status_change_is_told_to_the_status_manager_at_once(cri, containerd, tmp_path):
    deps = await worker_deps(cri, containerd, tmp_path)
    uid = str(uuid.uuid4())
    worker = PodWorker(uid, running_pod(uid), deps)
    status_manager = Inbox()
    async with running(status_manager.spec("status-manager")) as tree:
        worker.registry = tree.registry
        try:
            await running_ids(worker, uid)
            await trio.sleep(0.1)  # the inbox takes what was sent
            told = status_manager.take()
            # Pending before the work, then what the sync made of it: one message per change.
            assert len(told) >= 2 and set(told) == {PodStatusChanged(pod_uid=uid)}
            await worker.sync()  # nothing changed: nothing to tell
            await trio.sleep(0.1)
            assert status_manager.take() == []
        finally:
            await worker.terminate(TerminatePod(reason="test over"))


class CountingReads:
    """Counts the list calls a pod status read makes, passing everything through."""

    def __init__(self, cri) -> None:
        self.cri = cri
        self.lists = 0

    def __getattr__(self, name):
        attribute = getattr(self.cri, name)
        if name in ("list_pod_sandbox", "list_containers"):
            async def counted(*args, **kwargs):
                self.lists += 1
                return await attribute(*args, **kwargs)
            return counted
        return attribute


@pytest.mark.containerd
async def test_a_pod_the_plegs_view_lacks_is_started_without_reading_the_runtime(cri, containerd, tmp_path):
    deps = await worker_deps(cri, containerd, tmp_path)
    counting = CountingReads(cri)
    deps.runtime.attach(counting, await cri.version())
    runtime_pods = RuntimePods()
    deps = dataclasses.replace(deps, runtime_pods=runtime_pods)
    runtime_pods.relisted(await relist(cri), trio.current_time())
    uid = str(uuid.uuid4())
    first = PodWorker(uid, running_pod(uid), deps)
    try:
        await first.sync()
        assert counting.lists == 0  # the PLEG's view said the runtime holds nothing of it
        created = await read_pod_status(cri, uid)
        assert len(created.sandboxes) == 1 and {c.name for c in created.containers} == {"a", "b"}
        # A second worker for the same pod (the first one crashed): the view predates what
        # the first made, so it reads the runtime and adopts it, creating nothing.
        second = PodWorker(uid, running_pod(uid), deps)
        await second.sync()
        assert counting.lists > 0
        after = await read_pod_status(cri, uid)
        assert [s.id for s in after.sandboxes] == [s.id for s in created.sandboxes]
        assert sorted(c.id for c in after.containers) == sorted(c.id for c in created.containers)
    finally:
        await first.terminate(TerminatePod(reason="test over"))
