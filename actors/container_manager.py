"""The node's cgroups for pods (Go: pkg/kubelet/cm's container manager with cgroupsPerQOS):
the kubepods hierarchy made at start under cgroupRoot — kubepods, holding node allocatable
when enforceNodeAllocatable has "pods", with burstable and besteffort below it — a cgroup per
pod made before its sandbox and removed once its containers are gone, the QoS cgroups' cpu
shares kept in step with their pods (from the board's running sum of Burstable cpu
requests, not a sum over every pod at each pod cgroup), and each container's CRI resources. The runtime puts a
pod's sandbox and containers under the pod's cgroup (the sandbox's cgroup_parent).

The numbers are decided in pods/container_resources.py and pods/cgroup_names.py; the files
are written by ports/cgroups/. Pod workers, GC and the eviction manager call in; the calls
that touch the cgroup filesystem run in a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod import Container, Pod
from pykubelet.pods.cgroup_names import (
    KUBEPODS,
    CgroupName,
    cgroupfs_path,
    parse_cgroupfs,
    pod_cgroup_name,
    pod_uid_from_cgroup,
    qos_cgroup_name,
)
from pykubelet.pods.container_resources import (
    ResourceConfig,
    container_linux_resources,
    hugepage_unit_size,
    milli_cpu_to_shares,
    pod_resource_config,
    qos_cgroup_cpu_shares_of,
)
from pykubelet.ports.cgroups import CgroupConfig, CgroupError, CgroupManager, CgroupMode, detect_cgroup_mode

log = logging.getLogger("pykubelet.container_manager")

QOS_TIERS = ("Burstable", "BestEffort")  # Guaranteed pods sit in kubepods itself


class ContainerManagerError(Exception):
    """The node's cgroups cannot be set up as configured; the daemon refuses to start."""


@dataclass(frozen=True)
class ContainerManagerSettings:
    cgroups_per_qos: bool = True
    cgroup_root: str = "/"
    cpu_cfs_quota: bool = True
    cpu_cfs_quota_period_us: int = 100_000
    pod_pids_limit: int = -1
    fail_cgroup_v1: bool = True
    enforce_pods_allocatable: bool = True  # enforceNodeAllocatable has "pods"
    # What kubepods may use when enforced: capacity less kubeReserved and systemReserved (Go's
    # getNodeAllocatableAbsolute; the eviction thresholds are not taken off here).
    kubepods_cpu_milli: int = 0
    kubepods_memory: int = 0
    kubepods_pids: int = 0  # 0: not limited
    memory_capacity: int = 0  # the node's, for the OOM score of Burstable containers
    embedded_runtime: bool = False


@dataclass
class ContainerManager:
    settings: ContainerManagerSettings
    cgroups: CgroupManager | None  # None: pods get no cgroups of their own (cgroupsPerQOS false)
    # The Burstable pods' cpu requests summed (millicores), for the QoS cgroups' shares.
    burstable_cpu_requests: Callable[[], int] = lambda: 0
    _kubepods: CgroupName = field(init=False)

    def __post_init__(self) -> None:
        self._kubepods = (*parse_cgroupfs(self.settings.cgroup_root), *KUBEPODS)

    @classmethod
    def for_node(cls, settings: ContainerManagerSettings, burstable_cpu_requests: Callable[[], int] = lambda: 0,
                 mode: CgroupMode | None = None) -> ContainerManager:
        """Detects the node's cgroups and refuses what Go refuses: a cgroup v1 host while
        failCgroupV1, cgroupsPerQOS on a node without a cgroup filesystem."""
        mode = mode or detect_cgroup_mode()
        if settings.embedded_runtime:
            # Its containers are plain host processes in no cgroup of the kubelet's: the
            # cgroup version does not matter (failCgroupV1 is about the pods' cgroups).
            log.warning("the embedded runtime runs containers without cgroups: resource requests and "
                        "limits are reported (qosClass) but not enforced")
            return cls(settings, None, burstable_cpu_requests)
        if settings.fail_cgroup_v1 and mode.version == 1:
            raise ContainerManagerError(
                "this host uses cgroup v1, and failCgroupV1 is true (the Go kubelet's default since 1.35): "
                "move the host to cgroup v2, or set failCgroupV1: false (--fail-cgroupv1=false) to run on "
                "cgroup v1, which Kubernetes keeps in maintenance mode only")
        if not settings.cgroups_per_qos:
            return cls(settings, None, burstable_cpu_requests)
        if mode.version == 0:
            raise ContainerManagerError(
                "cgroupsPerQOS is true but this host has no cgroup filesystem mounted at /sys/fs/cgroup: "
                "mount it, or set cgroupsPerQOS: false")
        try:
            return cls(settings, CgroupManager(mode), burstable_cpu_requests)
        except CgroupError as error:
            raise ContainerManagerError(str(error)) from None

    @property
    def enabled(self) -> bool:
        return self.cgroups is not None

    @property
    def cgroup_version(self) -> int:
        return self.cgroups.mode.version if self.cgroups is not None else 0

    # -- the kubepods hierarchy ----------------------------------------------------------

    def start(self) -> None:
        """Makes (or updates) kubepods and the QoS cgroups (Go: setupNode and the QoS
        container manager's Start). Raises ContainerManagerError."""
        if self.cgroups is None:
            return
        s = self.settings
        kubepods = CgroupConfig()
        if s.enforce_pods_allocatable:
            kubepods = CgroupConfig(
                cpu_shares=milli_cpu_to_shares(s.kubepods_cpu_milli),
                memory_limit=s.kubepods_memory or None,
                pids_limit=s.kubepods_pids or None,
            )
        try:
            self._ensure(cgroupfs_path(self._kubepods), kubepods, update=True)
            self._update_qos(create=True)
        except CgroupError as error:
            raise ContainerManagerError(f"setting up the kubepods cgroups: {error}") from None
        log.info("kubepods cgroups ready at %s (cgroup v%d)", cgroupfs_path(self._kubepods), self.cgroup_version)

    def _update_qos(self, *, create: bool = False) -> None:
        assert self.cgroups is not None
        shares = qos_cgroup_cpu_shares_of(self.burstable_cpu_requests())
        for tier in QOS_TIERS:
            config = CgroupConfig(cpu_shares=shares[tier.lower()])
            self._ensure(cgroupfs_path(qos_cgroup_name(tier, self._kubepods)), config, update=True, create=create)

    def _ensure(self, path: str, config: CgroupConfig, *, update: bool, create: bool = True) -> None:
        assert self.cgroups is not None
        if not self.cgroups.exists(path):
            if create:
                self.cgroups.create(path, config)
        elif update:
            self.cgroups.update(path, config)

    # -- pods --------------------------------------------------------------------------------

    def pod_cgroup(self, pod: Pod) -> str:
        """The pod's cgroup (cgroupfs path), "" when pods get none."""
        return cgroupfs_path(pod_cgroup_name(pod, self._kubepods)) if self.cgroups is not None else ""

    async def ensure_pod(self, pod: Pod) -> str:
        """Makes the pod's cgroup with its limits if it does not exist (Go: EnsureExists),
        and brings the QoS cgroups' shares up to date; the cgroup_parent for its sandbox.
        Raises CgroupError naming the file."""
        if self.cgroups is None:
            return ""
        path = self.pod_cgroup(pod)
        config = self._pod_config(pod)

        def ensure() -> None:
            self._ensure(path, config, update=False)
            self._update_qos()

        await trio.to_thread.run_sync(ensure)
        return path

    async def resize_pod(self, pod: Pod) -> None:
        """The pod's cgroup brought to its spec's resources after an in-place resize (Go:
        podContainerManager's SetPodCgroupConfig); raises CgroupError (a memory limit below
        what the pod uses now is EBUSY)."""
        if self.cgroups is None:
            return
        path, config = self.pod_cgroup(pod), self._pod_config(pod)

        def update() -> None:
            assert self.cgroups is not None
            if self.cgroups.exists(path):
                self.cgroups.update(path, config)
            self._update_qos()

        await trio.to_thread.run_sync(update)

    async def destroy_pod(self, uid: str) -> None:
        """Removes the pod's cgroup wherever it is (its QoS class may be unknown here: an
        orphan), killing what is left in it; the QoS shares follow."""
        if self.cgroups is None:
            return
        await trio.to_thread.run_sync(self._destroy, uid)

    def _destroy(self, uid: str) -> None:
        assert self.cgroups is not None
        for parent in self._qos_parents():
            path = f"{parent.rstrip('/')}/pod{uid}"
            if self.cgroups.exists(path):
                self.cgroups.destroy(path)
                log.info("pod cgroup removed", extra={"pod_uid": uid, "cgroup": path})
        self._update_qos()

    async def pod_cgroups(self) -> dict[str, str]:
        """Every pod cgroup on the node: uid -> path (Go: GetAllPodsFromCgroups), for GC."""
        if self.cgroups is None:
            return {}
        return await trio.to_thread.run_sync(self._pod_cgroups)

    def _pod_cgroups(self) -> dict[str, str]:
        assert self.cgroups is not None
        found: dict[str, str] = {}
        for parent in self._qos_parents():
            if not self.cgroups.exists(parent):
                continue
            for child in self.cgroups.list_children(parent):
                uid = pod_uid_from_cgroup(child.rsplit("/", 1)[-1], systemd=False)
                if uid is not None:
                    found[uid] = child
        return found

    def _qos_parents(self) -> list[str]:
        return [cgroupfs_path(self._kubepods)] + [cgroupfs_path(qos_cgroup_name(t, self._kubepods)) for t in QOS_TIERS]

    def _pod_config(self, pod: Pod) -> CgroupConfig:
        s = self.settings
        resources: ResourceConfig = pod_resource_config(
            pod, cpu_cfs_quota=s.cpu_cfs_quota, period_us=s.cpu_cfs_quota_period_us, pod_pids_limit=s.pod_pids_limit,
        )
        return CgroupConfig(
            cpu_shares=resources.cpu_shares,
            cpu_quota=resources.cpu_quota,
            cpu_period=resources.cpu_period,
            memory_limit=resources.memory_limit or None,
            pids_limit=resources.pids_limit,
            hugepage_limits={name: amount for size, amount in resources.hugepage_limits.items()
                             if (name := hugepage_unit_size(size))},
        )

    # -- containers ------------------------------------------------------------------------

    def container_resources(self, pod: Pod, container: Container) -> api_pb2.LinuxContainerResources:
        """CreateContainer's linux.resources (Go: generateLinuxContainerResources)."""
        s = self.settings
        r = container_linux_resources(
            pod, container, memory_capacity=s.memory_capacity, cpu_cfs_quota=s.cpu_cfs_quota,
            cpu_cfs_quota_period_us=s.cpu_cfs_quota_period_us, cgroup_v2=self.cgroup_version == 2,
        )
        return api_pb2.LinuxContainerResources(
            cpu_shares=r.cpu_shares,
            cpu_quota=r.cpu_quota,
            cpu_period=r.cpu_period,
            memory_limit_in_bytes=r.memory_limit_in_bytes,
            memory_swap_limit_in_bytes=r.memory_swap_limit_in_bytes,
            oom_score_adj=r.oom_score_adj,
            hugepage_limits=[api_pb2.HugepageLimit(page_size=size, limit=limit)
                             for size, limit in r.hugepage_limits.items()],
            unified=r.unified,
        )
