"""The raw CRI start bench/pod_start.py compares pykubelet with: the same pods' configs sent
straight to containerd (RunPodSandbox, CreateContainer, StartContainer), as a minimal,
well-written CRI client would, with at most `bound` pods in flight and each failed call
retried with the pod workers' back-off (every retry counted)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio
from cri_api.v1 import api_pb2
from prometheus_client import CollectorRegistry, generate_latest

from _support import BUSYBOX_IMAGE, NODE, BenchDaemon, sleeping_pod, sums_by_label
from tests.support.daemon import cgroup_root_for

from pykubelet.actors.container_manager import ContainerManager, ContainerManagerSettings
from pykubelet.actors.pod_workers.container_start import RETRY_MAX as CONTAINER_RETRY
from pykubelet.actors.pod_workers.worker import RETRY_INITIAL, RETRY_JITTER, RETRY_MAX
from pykubelet.pods.backoff import ExponentialBackoff
from pykubelet.pods.hosts_file import hosts_mount
from pykubelet.pods.labels import MANAGED_LABEL, POD_UID_LABEL
from pykubelet.pods.manifest import decode_manifests
from pykubelet.pods.runtime_config import container_config, sandbox_config
from pykubelet.ports.cri import DEFAULT_REQUEST_TIMEOUT, CriClient, CriError, RuntimeOperationMetrics

CRI_OPERATIONS = "kubelet_runtime_operations_duration_seconds"
START_OPERATIONS = ("run_podsandbox", "create_container", "start_container")
CLEANUP_BOUND = 16  # sandboxes stopped and removed at once after a round (untimed)
REMOVE_ATTEMPTS = 8


@dataclass
class RawNode:
    """What the raw starts need beside the runtime, made untimed before each start: a
    kubepods hierarchy of their own (a container manager on a cgroup root beside the
    daemon's, with the daemon's node allocatable), each pod's cgroup in it, and the files
    pykubelet mounts into a container (/etc/hosts, the termination message file)."""

    endpoint: str
    pod_logs_dir: str
    files: Path
    containers: ContainerManager

    @classmethod
    def beside(cls, daemon: BenchDaemon, endpoint: str) -> RawNode:
        root = daemon.base / "raw"
        settings = ContainerManagerSettings(
            cgroup_root=cgroup_root_for(root), fail_cgroup_v1=False,
            kubepods_cpu_milli=(os.cpu_count() or 1) * 1000, kubepods_memory=_memory_capacity(),
            memory_capacity=_memory_capacity(),
        )
        containers = ContainerManager.for_node(settings)
        containers.start()
        return cls(endpoint, str(daemon.base / "pod-logs"), root, containers)

    def close(self) -> None:
        if self.containers.cgroups is not None:
            self.containers.cgroups.destroy(self.containers.settings.cgroup_root)


def _memory_capacity() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


async def raw_configs(name: str, image_ref: str, node: RawNode):
    """The configs pykubelet sends for this manifest, without the managed label: the
    sandbox in its pod cgroup, the container with its CRI resources, /etc/hosts and
    termination message mounts (the cgroup and the files are made here, untimed)."""
    manifest = json.dumps(sleeping_pod(name)).encode()
    (pod,) = decode_manifests(manifest, origin=f"/bench/raw/{name}.json", source="file", node_name=NODE)
    sandbox = sandbox_config(pod, attempt=0, pod_logs_dir=node.pod_logs_dir)
    del sandbox.labels[MANAGED_LABEL]
    sandbox.linux.cgroup_parent = await node.containers.ensure_pod(pod)
    container = pod.spec.containers[0]
    files = node.files / pod.metadata.uid
    files.mkdir(parents=True, exist_ok=True)
    hosts, message = files / "etc-hosts", files / "termination-log"
    hosts.write_bytes(Path("/etc/hosts").read_bytes())
    message.touch()
    message.chmod(0o666)
    config = container_config(
        pod, container, image_ref=image_ref, restart_count=0, volume_paths={}, extra_mounts=[hosts_mount(str(hosts))],
    )
    config.mounts.append(api_pb2.Mount(container_path=container.termination_message_path, host_path=str(message)))
    config.linux.resources.CopyFrom(node.containers.container_resources(pod, container))
    del config.labels[MANAGED_LABEL]
    return sandbox, config


@dataclass
class RawStart:
    """One raw start of N pods: seconds from the common start to each pod's StartContainer
    returning (with the reads: to the end of the pod's status read after it), the (seconds,
    calls) of each start operation, and every retried call ("<operation>: <error>")."""

    latencies: list[float]
    cri: dict[str, tuple[float, int]]
    retries: list[str] = field(default_factory=list)
    bound: int = 0

    @property
    def whole(self) -> float:
        return max(self.latencies)


@dataclass
class _RawPod:
    """How far one pod's start got; after a failed call the next attempt reads the runtime
    for what that call may have done anyway (a call that timed out on this side may have
    finished in the runtime), as a pod worker's next sync reads the pod."""

    sandbox: api_pb2.PodSandboxConfig
    config: api_pb2.ContainerConfig
    sandbox_id: str = ""
    container_id: str = ""
    started: bool = False
    failed: bool = False

    async def recover(self, cri: CriClient) -> None:
        selector = {POD_UID_LABEL: self.sandbox.metadata.uid}
        if not self.sandbox_id:
            for sandbox in await cri.list_pod_sandbox(api_pb2.PodSandboxFilter(label_selector=selector)):
                if sandbox.state == api_pb2.SANDBOX_READY:
                    self.sandbox_id = sandbox.id
        if self.sandbox_id and not self.container_id:
            listed = await cri.list_containers(api_pb2.ContainerFilter(pod_sandbox_id=self.sandbox_id))
            if listed:
                self.container_id = listed[0].id
        if self.container_id and not self.started:
            status = await cri.container_status(self.container_id)
            self.started = status.status.state == api_pb2.CONTAINER_RUNNING

    async def advance(self, cri: CriClient) -> None:
        """The calls still to make, in order; returns with the container running."""
        if not self.sandbox_id:
            self.sandbox_id = await cri.run_pod_sandbox(self.sandbox)
        if not self.container_id:
            self.container_id = await cri.create_container(self.sandbox_id, self.config, self.sandbox)
        if not self.started:
            await cri.start_container(self.container_id)
            self.started = True

    def retry_delay(self, sandbox_backoff: ExponentialBackoff) -> float:
        """The pod workers' back-off: a failed sandbox (a failed sync) 1 s doubling to 10 s,
        jittered by up to half; a failed container create or start 10 s (container_start)."""
        return sandbox_backoff.next_delay() if not self.sandbox_id else CONTAINER_RETRY


async def raw_round(
    node: RawNode, names: list[str], bound: int, reads: bool = False, on_started: Callable[[RawStart], None] = print
) -> RawStart:
    """The N pods started through CRI alone, at most `bound` pods in flight (a pod holds
    its slot through its calls, not through a back-off wait); with `reads`, each pod also
    makes the reads a pod worker makes around its calls (a diagnostic). `on_started` is told
    the figures before the pods are removed (a removal that fails loses no figure)."""
    registry = CollectorRegistry()
    async with CriClient(
        node.endpoint, request_timeout=DEFAULT_REQUEST_TIMEOUT, metrics=RuntimeOperationMetrics(registry)
    ) as cri:
        image = await cri.image_status(BUSYBOX_IMAGE)
        configs = [await raw_configs(name, image.image.id, node) for name in names]
        result = RawStart([], {}, bound=bound)
        slots = trio.CapacityLimiter(bound)

        async def start_pod(pod: _RawPod, started: float) -> None:
            backoff = ExponentialBackoff(RETRY_INITIAL, RETRY_MAX, jitter=RETRY_JITTER)
            while True:
                async with slots:
                    try:
                        if pod.failed:
                            await pod.recover(cri)
                        if reads:  # what a pod worker reads before it acts
                            await _read_pod(cri, pod.sandbox.metadata.uid)
                            await cri.image_status(BUSYBOX_IMAGE)
                        await pod.advance(cri)
                        if reads:  # ... and after, to publish the status
                            await _read_pod(cri, pod.sandbox.metadata.uid)
                        break
                    except CriError as exc:
                        result.retries.append(f"{exc.operation}: {exc}")
                        pod.failed = True
                await trio.sleep(pod.retry_delay(backoff))
            result.latencies.append(time.perf_counter() - started)

        try:
            async with trio.open_nursery() as nursery:
                started = time.perf_counter()
                for sandbox, config in configs:
                    nursery.start_soon(start_pod, _RawPod(sandbox, config), started)
            cri_ops = sums_by_label(generate_latest(registry).decode(), CRI_OPERATIONS, "operation_type")
            result.cri = {op: cri_ops[op] for op in START_OPERATIONS}
            on_started(result)
        finally:
            with trio.CancelScope(shield=True):
                await _remove_pods(cri, {sandbox.metadata.uid for sandbox, _ in configs})
                for sandbox, _ in configs:
                    await node.containers.destroy_pod(sandbox.metadata.uid)
        return result


async def _read_pod(cri: CriClient, uid: str) -> None:
    """The CRI calls of ports/cri/pods.read_pod_status, by the pod UID label alone."""
    selector = {POD_UID_LABEL: uid}
    for sandbox in await cri.list_pod_sandbox(api_pb2.PodSandboxFilter(label_selector=selector)):
        if sandbox.state == api_pb2.SANDBOX_READY:
            await cri.pod_sandbox_status(sandbox.id)
    for container in await cri.list_containers(api_pb2.ContainerFilter(label_selector=selector)):
        await cri.container_status(container.id)


async def _remove_pods(cri: CriClient, uids: set[str]) -> None:
    """Every sandbox of these pods in the runtime (also one a timed-out call made), stopped
    and removed, CLEANUP_BOUND at once."""
    listed = await cri.list_pod_sandbox()
    ids = [sandbox.id for sandbox in listed if sandbox.labels.get(POD_UID_LABEL) in uids]
    slots = trio.CapacityLimiter(CLEANUP_BOUND)

    async def remove(sandbox_id: str) -> None:
        async with slots:
            await remove_sandbox(cri, sandbox_id)

    async with trio.open_nursery() as nursery:
        for sandbox_id in ids:
            nursery.start_soon(remove, sandbox_id)


async def remove_sandbox(cri: CriClient, sandbox_id: str) -> None:
    # StopPodSandbox stops its containers; RemovePodSandbox removes them with it. Under
    # heavy load (500 pods on 2 cores) containerd may still hold a container "in starting
    # state" after StartContainer returned, and refuse the removal, or not answer a stop
    # within the request timeout: try again a few times.
    for attempt in range(REMOVE_ATTEMPTS):
        try:
            await cri.stop_pod_sandbox(sandbox_id)
            await cri.remove_pod_sandbox(sandbox_id)
            return
        except CriError:
            if attempt == REMOVE_ATTEMPTS - 1:
                raise
            await trio.sleep(2.0)
