"""/stats/summary on a private containerd: pods run by pod workers, numbers read from CRI,
cgroup files and statfs, the JSON as the Go kubelet serves it."""

from __future__ import annotations

import json
import math
import uuid

import msgspec
import pytest
import trio

from pykubelet.actors.pod_workers.worker import PodWorker
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.actors.server.http import Request
from pykubelet.actors.server.stats import StatsProvider, StatsState
from pykubelet.actors.server.stats import provider as stats_provider
from pykubelet.messages.pod import Pod, pod_list
from pykubelet.messages.pod_updates import TerminatePod
from pykubelet.ports.cri import CriCallError
from pykubelet.ports.node_stats import CgroupMounts
from tests.integration.test_pod_worker import running_ids, running_pod, worker_deps

RATE_WINDOW = 1.1  # past MIN_RATE_WINDOW, so that a second reading gives a rate


def get(path: str = "/stats/summary", **query: str) -> Request:
    return Request(method="GET", path=path, query={k: [v] for k, v in query.items()}, headers={})


async def summary(provider: StatsProvider, **query: str) -> dict:
    response = await provider.summary(get(**query))
    assert response.status == 200, response.body
    assert response.content_type == "application/json"
    return json.loads(response.body)


class RunningPods:
    """Pod workers with their pods running, terminated on exit."""

    def __init__(self, cri, containerd, tmp_path) -> None:
        self.cri, self.containerd, self.tmp_path = cri, containerd, tmp_path
        self.workers: list[PodWorker] = []

    async def start(self, count: int):
        self.deps = await worker_deps(self.cri, self.containerd, self.tmp_path)
        for _ in range(count):
            uid = str(uuid.uuid4())
            worker = PodWorker(uid, running_pod(uid), self.deps)
            self.workers.append(worker)
            await running_ids(worker, uid)
        return self.deps

    @property
    def uids(self) -> set[str]:
        return {w.pod.metadata.uid for w in self.workers}

    async def stop(self) -> None:
        for worker in self.workers:
            await worker.terminate(TerminatePod(reason="test over"))


def provider_for(deps, tmp_path, **kw) -> StatsProvider:
    return StatsProvider(
        runtime=deps.runtime, pods=deps.statuses.pod_list, relist=lambda: None, root_dir=str(tmp_path),
        node_name="node1", pod_logs_dir=deps.node.pod_logs_dir, cri_stats_max_age=0.5, **kw,
    )


def ours(body: dict, uids: set[str]) -> dict[str, dict]:
    return {p["podRef"]["uid"]: p for p in body["pods"] if p["podRef"]["uid"] in uids}


@pytest.mark.containerd
async def test_summary_lists_both_pods_with_cpu_memory_and_filesystems(cri, containerd, tmp_path):
    pods = RunningPods(cri, containerd, tmp_path)
    try:
        deps = await pods.start(2)
        provider = provider_for(deps, tmp_path)
        first = await summary(provider)
        listed = ours(first, pods.uids)
        assert set(listed) == pods.uids
        for uid, pod in listed.items():
            assert pod["podRef"]["namespace"] == "default" and pod["podRef"]["name"] == f"update-{uid[:8]}"
            assert sorted(c["name"] for c in pod["containers"]) == ["a", "b"]
            for c in pod["containers"]:
                assert c["cpu"]["usageCoreNanoSeconds"] > 0
                assert c["memory"]["workingSetBytes"] > 0
                assert c["rootfs"]["capacityBytes"] > 0 and "usedBytes" in c["rootfs"]  # the writable layer
                assert c["logs"]["inodesUsed"] >= 1  # its 0.log
            assert pod["cpu"]["usageCoreNanoSeconds"] == sum(c["cpu"]["usageCoreNanoSeconds"] for c in pod["containers"])
            assert pod["memory"]["workingSetBytes"] > 0
            assert pod["process_stats"]["process_count"] >= 2  # each container's sh, at least
            assert pod["ephemeral-storage"]["capacityBytes"] > 0
            assert pod["network"]["interfaces"]  # host network: the node's interfaces
        node = first["node"]
        assert node["nodeName"] == "node1"
        assert node["fs"]["capacityBytes"] > 0 and node["fs"]["availableBytes"] > 0
        assert node["runtime"]["imageFs"]["capacityBytes"] > 0
        assert node["cpu"]["usageCoreNanoSeconds"] > 0 and node["memory"]["workingSetBytes"] > 0
        assert node["rlimit"]["maxpid"] > 0 and node["rlimit"]["curproc"] > 0
        assert "usageNanoCores" not in node["cpu"]  # one reading gives no rate yet
        assert all("usageNanoCores" not in c["cpu"] for p in listed.values() for c in p["containers"])

        await trio.sleep(RATE_WINDOW)
        second = ours(await summary(provider), pods.uids)
        for pod in second.values():
            assert all(c["cpu"]["usageNanoCores"] > 0 for c in pod["containers"])  # the loop wakes 10 times a second
            assert pod["cpu"]["usageNanoCores"] == sum(c["cpu"]["usageNanoCores"] for c in pod["containers"])
    finally:
        await pods.stop()


@pytest.mark.containerd
async def test_only_cpu_and_memory_leaves_out_filesystems_and_network(cri, containerd, tmp_path):
    pods = RunningPods(cri, containerd, tmp_path)
    try:
        deps = await pods.start(1)
        body = await summary(provider_for(deps, tmp_path), only_cpu_and_memory="true")
        assert set(body["node"]) == {"nodeName", "startTime", "cpu", "memory"}
        (pod,) = ours(body, pods.uids).values()
        assert set(pod) == {"podRef", "startTime", "containers", "cpu", "memory"}
        assert all(set(c) == {"name", "startTime", "cpu", "memory"} for c in pod["containers"])
        # Go takes only exactly "true".
        full = await summary(provider_for(deps, tmp_path), only_cpu_and_memory="1")
        assert "fs" in full["node"]
    finally:
        await pods.stop()


@pytest.mark.containerd
async def test_without_the_runtimes_stats_the_cgroups_give_the_numbers(cri, containerd, tmp_path):
    """As with a runtime that does not implement the CRI stats calls (the embedded one):
    each container's cgroup, found by its folder name, gives cpu, memory and processes."""
    pods = RunningPods(cri, containerd, tmp_path)
    try:
        deps = await pods.start(1)
        state = StatsState()
        state.sandbox_stats_retry_at = state.container_stats_retry_at = math.inf  # never asked
        provider = provider_for(deps, tmp_path, state=state)
        (pod,) = ours(await summary(provider, only_cpu_and_memory="true"), pods.uids).values()
        for c in pod["containers"]:
            assert c["cpu"]["usageCoreNanoSeconds"] > 0 and c["memory"]["workingSetBytes"] > 0
        assert all(path.startswith("/k8s.io/") for path in state.cgroups.values())  # containerd's cgroupfs layout
        await trio.sleep(RATE_WINDOW)
        (pod,) = ours(await summary(provider), pods.uids).values()
        assert all(c["cpu"]["usageNanoCores"] > 0 for c in pod["containers"])
        assert all("rootfs" not in c for c in pod["containers"])  # only the runtime knows the writable layer
        assert pod["process_stats"]["process_count"] >= 2
    finally:
        await pods.stop()


@pytest.mark.containerd
async def test_with_no_cgroup_found_the_runtimes_sample_still_gives_cpu_and_memory(
    cri, containerd, tmp_path, monkeypatch
):
    monkeypatch.setattr(stats_provider, "CGROUP_RESCAN_INTERVAL", 0.0)
    pods = RunningPods(cri, containerd, tmp_path)
    try:
        deps = await pods.start(1)
        state = StatsState()
        empty = tmp_path / "no-cgroups"
        empty.mkdir()
        state.mounts = CgroupMounts(memory=str(empty))
        provider = provider_for(deps, tmp_path, state=state)
        (pod,) = ours(await summary(provider), pods.uids).values()
        for c in pod["containers"]:
            assert c["cpu"]["usageCoreNanoSeconds"] > 0 and c["memory"]["workingSetBytes"] > 0
        assert "process_stats" not in pod  # only cgroups count processes
        # What a scan did not find is not looked for again (a runtime without cgroups).
        scanned_at = state.scanned_at
        assert scanned_at > 0 and state.not_found
        await summary(provider)
        assert state.scanned_at == scanned_at
    finally:
        await pods.stop()


@pytest.mark.containerd
async def test_with_run_going_requests_take_its_sample(cri, containerd, tmp_path):
    pods = RunningPods(cri, containerd, tmp_path)
    try:
        deps = await pods.start(1)
        provider = provider_for(deps, tmp_path)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(provider.run)
            with trio.fail_after(5):
                while provider.state.sample is None:
                    await trio.sleep(0.02)
            first = provider.state.sample
            await summary(provider)
            assert provider.state.sample is first  # the request waited for no sample of its own
            await trio.sleep(3 * 0.5)  # cri_stats_max_age: the loop took new ones meanwhile
            assert provider.state.sample.taken_at > first.taken_at
            (pod,) = ours(await summary(provider), pods.uids).values()
            assert all(c["cpu"]["usageNanoCores"] > 0 for c in pod["containers"])
            nursery.cancel_scope.cancel()
    finally:
        await pods.stop()


@pytest.mark.containerd
async def test_an_empty_dir_volume_is_measured_into_ephemeral_storage(cri, containerd, tmp_path):
    pods = RunningPods(cri, containerd, tmp_path)
    try:
        deps = await pods.start(1)
        (uid,) = pods.uids
        data = tmp_path / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "data"
        data.mkdir(parents=True)
        (data / "blob").write_bytes(b"x" * 200_000)
        body = msgspec.to_builtins(running_pod(uid))
        body["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}, {"name": "host", "hostPath": {"path": "/tmp"}}]
        pod = msgspec.convert(body, Pod)
        provider = provider_for(deps, tmp_path)
        provider.pods = lambda: pod_list([pod])
        (listed,) = ours(await summary(provider), pods.uids).values()
        (volume,) = listed["volume"]  # hostPath volumes have no metrics, as in Go
        assert volume["name"] == "data" and volume["usedBytes"] >= 200_000 and volume["inodesUsed"] == 2
        assert volume["capacityBytes"] > 0
        assert listed["ephemeral-storage"]["usedBytes"] >= 200_000
    finally:
        await pods.stop()


async def test_an_unreachable_runtime_is_a_500_naming_it(tmp_path):
    handle = RuntimeHandle("unix:///nonexistent/containerd.sock")  # the runtime link never connected
    provider = StatsProvider(runtime=handle, pods=lambda: pod_list([]), relist=lambda: None,
                             root_dir=str(tmp_path), node_name="node1")
    response = await provider.summary(get())
    assert response.status == 500
    assert response.body.decode().startswith("Internal Error: failed to list pod stats: ")
    assert "unix:///nonexistent/containerd.sock" in response.body.decode()


async def test_other_methods_are_refused(tmp_path):
    provider = StatsProvider(runtime=RuntimeHandle("unix:///x.sock"), pods=lambda: pod_list([]),
                             relist=lambda: None, root_dir=str(tmp_path), node_name="node1")
    response = await provider.summary(Request(method="DELETE", path="/stats/summary", query={}, headers={}))
    assert response.status == 405


@pytest.mark.containerd
async def test_containerd_answers_container_stats_but_refuses_sandbox_stats_without_a_cgroup_parent(
    cri, containerd, tmp_path
):
    """What the stats provider relies on (containerd 1.6.20): ListContainerStats works;
    ListPodSandboxStats fails for sandboxes run without a cgroup parent, as pykubelet runs them."""
    pods = RunningPods(cri, containerd, tmp_path)
    try:
        await pods.start(1)
        stats = await cri.list_container_stats()
        assert len(stats) == 2 and all(s.cpu.usage_core_nano_seconds.value > 0 for s in stats)
        assert all(s.writable_layer.fs_id.mountpoint for s in stats)
        one = await cri.container_stats(stats[0].attributes.id)
        assert one.attributes.id == stats[0].attributes.id
        with pytest.raises(CriCallError, match="cgroupPath is empty"):
            await cri.list_pod_sandbox_stats()
    finally:
        await pods.stop()
