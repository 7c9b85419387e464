"""The stats summary's node and pods, built from one request's listing, the runtime's sample
and what was read from cgroup files, /proc and statfs: the runtime's numbers first, the
files' where it has none. No I/O: the stats provider gathers what it is given."""

from __future__ import annotations

import msgspec

from pykubelet.messages.cri_api import api_pb2
from pykubelet.pods import stats_summary as summary
from pykubelet.pods.stats_summary import (
    ContainerStats, Cpu, CpuUsageCache, Fs, Interface, ListedContainer, ListedSandbox, Network, NodeStats,
    PodStats, Rlimit, Usage, VolumeStats,
)
from pykubelet.ports.node_stats import ReadPlan, Readings

from .cri_stats import CriSample, int_field


class SummaryParts:
    """Builds the summary's node and pods from one request's listing, sample and reads."""

    def __init__(self, plan: ReadPlan, readings: Readings, sample: CriSample,
                 image_fs: api_pb2.ImageFsInfoResponse | None, cpu: CpuUsageCache) -> None:
        self.plan, self.readings, self.sample, self.image_fs_info, self.cpu = plan, readings, sample, image_fs, cpu
        self.root_fs = readings.statfs.get(plan.root_dir)

    def node(self, name: str) -> NodeStats:
        plan, readings = self.plan, self.readings
        root = readings.node_cgroup
        cpu = None
        if root is not None and root.cpu_usage_ns is not None:
            cpu = self.cpu.with_rate("node", Cpu(time=root.time, usage_core_nano_seconds=root.cpu_usage_ns))
        memory = root.memory if root is not None and root.memory is not None else readings.node_memory
        image_fs = self._image_fs()
        return NodeStats(
            name=name, start_time=readings.boot_time if readings.boot_time is not None else plan.now,
            cpu=cpu, memory=memory,
            network=_network(plan.now, readings.node_network),
            fs=self.root_fs,
            image_fs=image_fs, container_fs=image_fs,  # Go's CRI stats: the same filesystem
            rlimit=Rlimit(time=plan.now, max_pid=readings.max_pid, cur_proc=readings.cur_proc) if plan.full else None,
        )

    def _image_fs(self) -> Fs | None:
        """Go's ImageFsStats: used from the runtime, sizes of its filesystem (the first)."""
        if self.image_fs_info is None or not self.image_fs_info.image_filesystems:
            return None
        fs = self.image_fs_info.image_filesystems[0]
        used = Fs(time=fs.timestamp / 1e9 if fs.timestamp else self.plan.now,
                  used_bytes=int_field(fs, "used_bytes"), inodes_used=int_field(fs, "inodes_used"))
        return _on(self.readings.statfs.get(fs.fs_id.mountpoint), used)

    def pod(self, sandbox: ListedSandbox, listed: list[ListedContainer]) -> PodStats:
        plan, readings = self.plan, self.readings
        containers = tuple(self._container(c) for c in listed)
        counts = [readings.process_counts[c.id] for c in listed if c.id in readings.process_counts]
        pod_cpu = pod_memory = network = process_count = None
        from_runtime = self.sample.sandboxes.get(sandbox.id)
        pod_cgroup = readings.pods.get(sandbox.uid)
        if from_runtime is not None:
            pod_cpu, pod_memory, network = from_runtime.cpu, from_runtime.memory, from_runtime.network
            process_count = from_runtime.process_count
        elif pod_cgroup is not None:
            if pod_cgroup.cpu_usage_ns is not None:
                pod_cpu = Cpu(time=pod_cgroup.time, usage_core_nano_seconds=pod_cgroup.cpu_usage_ns)
            pod_memory = pod_cgroup.memory
        if counts:  # Go sums its containers' process counts
            process_count = sum(counts)
        if network is None:
            network = _network(plan.now, readings.networks.get(sandbox.id))
        volumes = tuple(
            VolumeStats(name=folder.rsplit("/", 1)[1],
                        fs=summary.with_usage(readings.statfs[folder], readings.volume_usage[folder]))
            for folder in plan.volumes.get(sandbox.uid, ()) if folder in readings.volume_usage
        )
        full = plan.full
        return PodStats(
            name=sandbox.name, namespace=sandbox.namespace, uid=sandbox.uid, start_time=sandbox.created_at,
            containers=containers, cpu=self.cpu.with_rate(("pod", sandbox.uid), pod_cpu), memory=pod_memory,
            network=network if full else None, volumes=volumes, process_count=process_count if full else None,
            root_fs=self.root_fs if full else None,
            pod_logs=_some_files(readings.pod_logs.get(sandbox.uid)), etc_hosts=readings.etc_hosts.get(sandbox.uid),
        )

    def _container(self, c: ListedContainer) -> ContainerStats:
        readings = self.readings
        from_runtime = self.sample.containers.get(c.id)
        cgroup = readings.containers.get(c.id)
        cpu = memory = rootfs = logs = None
        if cgroup is not None:
            if cgroup.cpu_usage_ns is not None:
                cpu = Cpu(time=cgroup.time, usage_core_nano_seconds=cgroup.cpu_usage_ns)
            memory = cgroup.memory
        if from_runtime is not None:
            cpu = cpu if cpu is not None else from_runtime.cpu
            memory = memory if memory is not None else from_runtime.memory
            if from_runtime.writable_layer is not None:
                rootfs = _on(readings.statfs.get(from_runtime.mountpoint), from_runtime.writable_layer)
        usage = readings.logs.get(c.id)
        if usage is not None:
            # Go: a log folder without files gives the root fs's sizes and no usage.
            logs = summary.with_usage(self.root_fs, _some_files(usage))
        return ContainerStats(
            name=c.name, start_time=c.created_at, cpu=self.cpu.with_rate(("container", c.id), cpu),
            memory=memory, rootfs=rootfs, logs=logs,
        )


def _on(sizes: Fs | None, used: Fs) -> Fs:
    """`used` (bytes and inodes used, and its time) on a filesystem's sizes, when known."""
    if sizes is None:
        return used
    return msgspec.structs.replace(sizes, time=used.time, used_bytes=used.used_bytes, inodes_used=used.inodes_used)


def _network(now: float, interfaces: list[Interface] | None) -> Network | None:
    return Network(time=now, interfaces=tuple(interfaces)) if interfaces is not None else None


def _some_files(usage: Usage | None) -> Usage | None:
    return usage if usage is not None and usage.inodes_used else None
