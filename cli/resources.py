"""The node's budget from the configuration, checked before anything starts: capacity read from
the machine, allocatable after kubeReserved, systemReserved and the hard eviction thresholds
(a reservation that does not fit is refused, as the Go kubelet refuses to start), the
container manager's settings, and the kubepods cgroups made (Go: setupNode)."""

from __future__ import annotations

from dataclasses import dataclass

from pykubelet.actors.container_manager import ContainerManager, ContainerManagerError, ContainerManagerSettings
from pykubelet.actors.eviction_manager import EvictionSettings
from pykubelet.actors.node_status import read_node_facts
from pykubelet.messages.config import KubeletConfiguration
from pykubelet.pods.cgroup_names import KUBEPODS, cgroupfs_path, parse_cgroupfs
from pykubelet.pods.eviction_thresholds import Threshold, parse_thresholds
from pykubelet.pods.node import NodeFacts, node_capacity
from pykubelet.pods.node_allocatable import (
    ReservationError,
    allocatable,
    parse_reserved,
    reservation,
    validate_reservation,
)
from pykubelet.ports.cgroups import CgroupError

from .config import ConfigurationError


@dataclass(frozen=True)
class NodeBudget:
    """Amounts in node_allocatable.py's units: cpu in millicores, bytes, a pod count."""

    facts: NodeFacts  # the machine as read once at start
    capacity: dict[str, int]
    allocatable: dict[str, int]  # what pods may be scheduled against (node status, admission)
    kubepods: dict[str, int]  # what the kubepods cgroup may use: the reserves off, not the thresholds


def thresholds(config: KubeletConfiguration) -> list[Threshold]:
    """The configuration's eviction thresholds, hard and soft (validated with it)."""
    return parse_thresholds(config.eviction_hard, config.eviction_soft, config.eviction_soft_grace_period,
                            config.eviction_minimum_reclaim, enforce_node_allocatable=config.enforce_node_allocatable)


def node_budget(config: KubeletConfiguration, root_dir: str) -> NodeBudget:
    facts = read_node_facts(root_dir)
    capacity = node_capacity(facts, config.max_pods)
    hard = [t for t in thresholds(config) if t.hard]
    try:
        validate_reservation(capacity, config.kube_reserved, config.system_reserved, hard)
    except ReservationError as error:
        raise ConfigurationError(str(error)) from None
    reserved = reservation(capacity, config.kube_reserved, config.system_reserved)
    return NodeBudget(
        facts=facts,
        capacity=capacity,
        allocatable=allocatable(capacity, config.kube_reserved, config.system_reserved, hard),
        kubepods={name: amount - reserved.get(name, 0) for name, amount in capacity.items()},
    )


def container_manager_settings(
    config: KubeletConfiguration, budget: NodeBudget, *, embedded_runtime: bool
) -> ContainerManagerSettings:
    enforce = "pods" in config.enforce_node_allocatable
    pid_reserved = sum(parse_reserved(field, reserved).get("pid", 0) for field, reserved in
                       (("kubeReserved", config.kube_reserved), ("systemReserved", config.system_reserved)))
    return ContainerManagerSettings(
        cgroups_per_qos=config.cgroups_per_qos,
        cgroup_root=config.cgroup_root or "/",
        cpu_cfs_quota=config.cpu_cfs_quota,
        cpu_cfs_quota_period_us=round(config.cpu_cfs_quota_period * 1_000_000),
        pod_pids_limit=config.pod_pids_limit,
        fail_cgroup_v1=config.fail_cgroup_v1,
        enforce_pods_allocatable=enforce,
        kubepods_cpu_milli=budget.kubepods["cpu"],
        kubepods_memory=budget.kubepods["memory"],
        kubepods_pids=_max_pids() - pid_reserved if pid_reserved else 0,
        memory_capacity=budget.capacity["memory"],
        embedded_runtime=embedded_runtime,
    )


def eviction_settings(
    config: KubeletConfiguration, budget: NodeBudget, containers: ContainerManagerSettings, *,
    root_dir: str,
) -> EvictionSettings:
    kubepods = None
    if containers.cgroups_per_qos and not containers.embedded_runtime:
        kubepods = cgroupfs_path((*parse_cgroupfs(containers.cgroup_root), *KUBEPODS))
    return EvictionSettings(
        thresholds=thresholds(config),
        pressure_transition_period=config.eviction_pressure_transition_period,
        max_pod_grace_period=config.eviction_max_pod_grace_period,
        local_storage_capacity_isolation=config.local_storage_capacity_isolation,
        root_dir=root_dir,
        pod_logs_dir=config.pod_logs_dir,
        allocatable_memory=budget.kubepods["memory"],
        kubepods_cgroup=kubepods,
    )


def start_container_manager(settings: ContainerManagerSettings) -> ContainerManager:
    """Detects the node's cgroups and makes the kubepods hierarchy; ConfigurationError (exit
    2) when the host or the configuration does not allow it."""
    try:
        manager = ContainerManager.for_node(settings)
        manager.start()
    except (ContainerManagerError, CgroupError) as error:
        raise ConfigurationError(str(error)) from None
    return manager


def _max_pids() -> int:
    """The node's pid capacity (Go: the smaller of kernel.pid_max and kernel.threads-max)."""
    limits = []
    for name in ("pid_max", "threads-max"):
        try:
            with open(f"/proc/sys/kernel/{name}") as file:
                limits.append(int(file.read().strip()))
        except (OSError, ValueError):
            pass
    return min(limits) if limits else 1 << 22
