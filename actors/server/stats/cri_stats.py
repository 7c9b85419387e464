"""The runtime's side of the stats summary: its listed sandboxes and containers, and its
stats sample (ListPodSandboxStats or ListContainerStats) made from the CRI messages into the
summary's values. Pure conversions; the stats provider asks the runtime."""

from __future__ import annotations

from typing import Any

import msgspec

from pykubelet.messages.cri_api import api_pb2
from pykubelet.pods.labels import CONTAINER_NAME_LABEL
from pykubelet.pods.stats_summary import Cpu, Fs, Interface, ListedContainer, ListedSandbox, Memory, Network


class ContainerSample(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    cpu: Cpu | None = None  # cumulative; the rate is the provider's
    memory: Memory | None = None
    writable_layer: Fs | None = None  # used bytes and inodes, without the filesystem's sizes
    mountpoint: str = ""  # of the writable layer's filesystem


class SandboxSample(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    cpu: Cpu | None = None
    memory: Memory | None = None
    network: Network | None = None
    process_count: int | None = None


class CriSample(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The runtime's stats of the managed containers (and sandboxes, from
    ListPodSandboxStats), taken at `taken_at` on the provider's clock."""

    taken_at: float
    containers: dict[str, ContainerSample] = {}
    sandboxes: dict[str, SandboxSample] = {}


def listed_sandbox(s: api_pb2.PodSandbox) -> ListedSandbox:
    return ListedSandbox(
        id=s.id, name=s.metadata.name, namespace=s.metadata.namespace, uid=s.metadata.uid,
        created_at=s.created_at / 1e9, ready=s.state == api_pb2.SANDBOX_READY,
    )


def listed_container(c: api_pb2.Container) -> ListedContainer:
    return ListedContainer(
        id=c.id, sandbox_id=c.pod_sandbox_id, name=c.labels.get(CONTAINER_NAME_LABEL, c.metadata.name),
        created_at=c.created_at / 1e9, running=c.state == api_pb2.CONTAINER_RUNNING,
    )


def int_field(message: Any, field: str) -> int | None:
    """A wrapped integer field of a CRI message (UInt64Value), None when unset."""
    return getattr(message, field).value if message.HasField(field) else None


def _cri_cpu(parent: Any) -> Cpu | None:
    """The cumulative usage; the runtime's usageNanoCores is not used (containerd 1.6 says
    0 for a first reading and keeps one cache for all its callers, containerd#9531)."""
    if not parent.HasField("cpu") or not parent.cpu.HasField("usage_core_nano_seconds"):
        return None
    return Cpu(time=parent.cpu.timestamp / 1e9, usage_core_nano_seconds=parent.cpu.usage_core_nano_seconds.value)


def _cri_memory(parent: Any) -> Memory | None:
    if not parent.HasField("memory") or not parent.memory.timestamp:
        return None
    m = parent.memory
    return Memory(
        time=m.timestamp / 1e9,
        available_bytes=int_field(m, "available_bytes") or None,  # containerd: 0 for no limit
        usage_bytes=int_field(m, "usage_bytes"), working_set_bytes=int_field(m, "working_set_bytes"),
        rss_bytes=int_field(m, "rss_bytes"), page_faults=int_field(m, "page_faults"),
        major_page_faults=int_field(m, "major_page_faults"),
    )


def container_sample(stats: api_pb2.ContainerStats, *, taken_at: float) -> ContainerSample:
    layer = stats.writable_layer if stats.HasField("writable_layer") else None
    return ContainerSample(
        cpu=_cri_cpu(stats), memory=_cri_memory(stats),
        # containerd 1.6 sets no timestamp on the writable layer: the sample's time then.
        writable_layer=Fs(
            time=layer.timestamp / 1e9 if layer.timestamp else taken_at,
            used_bytes=int_field(layer, "used_bytes"), inodes_used=int_field(layer, "inodes_used"),
        ) if layer is not None else None,
        mountpoint=layer.fs_id.mountpoint if layer is not None else "",
    )


def sandboxes_sample(stats: list[api_pb2.PodSandboxStats], *, taken_at: float) -> CriSample:
    containers: dict[str, ContainerSample] = {}
    sandboxes: dict[str, SandboxSample] = {}
    for pod in stats:
        linux = pod.linux
        for container in linux.containers:
            containers[container.attributes.id] = container_sample(container, taken_at=taken_at)
        network = None
        if linux.HasField("network") and linux.network.timestamp:
            usages = [*([linux.network.default_interface] if linux.network.HasField("default_interface") else []),
                      *linux.network.interfaces]
            interfaces: dict[str, Interface] = {}
            for usage in usages:
                interfaces.setdefault(usage.name, Interface(
                    name=usage.name, rx_bytes=int_field(usage, "rx_bytes"), rx_errors=int_field(usage, "rx_errors"),
                    tx_bytes=int_field(usage, "tx_bytes"), tx_errors=int_field(usage, "tx_errors"),
                ))
            network = Network(time=linux.network.timestamp / 1e9, interfaces=tuple(interfaces.values()))
        sandboxes[pod.attributes.id] = SandboxSample(
            cpu=_cri_cpu(linux), memory=_cri_memory(linux), network=network,
            process_count=int_field(linux.process, "process_count") if linux.HasField("process") else None,
        )
    return CriSample(taken_at=taken_at, containers=containers, sandboxes=sandboxes)
