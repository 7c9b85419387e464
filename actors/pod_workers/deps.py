"""What every pod worker shares: the runtime connection, the status board, the back-offs
(kept across worker restarts, as the Go kubelet keeps them for the kubelet's life), the
metrics and the node's settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import trio

from pykubelet.actors.container_manager import ContainerManager
from pykubelet.actors.events import EventRecorder
from pykubelet.actors.pleg import RuntimePods
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.probes.results import ProbeResults
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.actors.volumes.manager import VolumeManager
from pykubelet.actors.volumes.object_cache import ObjectCache
from pykubelet.pods.backoff import CrashLoopBackOff

from .metrics import PodMetrics


@dataclass(frozen=True)
class NodeSettings:
    name: str
    host_ip: str
    root_dir: str
    pod_logs_dir: str
    cluster_dns: tuple[str, ...] = ()  # clusterDNS
    cluster_domain: str = ""  # clusterDomain
    resolv_conf: str = "/etc/resolv.conf"  # resolvConf ("": no DNS from the host)
    # What a resourceFieldRef without a limit reads: quantities, e.g. {"cpu": "2", "memory": "8Gi"}.
    allocatable: Mapping[str, str] = field(default_factory=dict)


# Pods starting at once on the node: a pod holds a start slot from its sandbox's creation
# (RunPodSandbox) through its containers' CreateContainer and StartContainer, until its
# sync ends or first waits on something slower than the runtime's start calls (an image
# pull, a postStart hook). Measured on 2 CPUs with containerd 1.6 (docs/performance.md,
# "500 pods a node"): 500 RunPodSandbox calls in flight at once made each take ~100 s and
# no pod ran before all sandboxes were made; a bound on sandboxes alone (32) left the
# container calls of every pod past its sandbox at the runtime at once (75-85 s for 500
# pods against 57-63 s for the raw start that sends 16 pods at a time). With 16 pods at a
# time the 500 start in 1.02x that raw start; 30 pods start as fast 16 at a time as all
# at once, in the raw start and here. A slow sandbox (a hanging CNI plugin) holds one
# slot for at most its call's deadline.
PARALLEL_POD_STARTS = 16


@dataclass(frozen=True)
class PodWorkerDeps:
    runtime: RuntimeHandle
    statuses: PodStatuses
    crash_backoff: CrashLoopBackOff
    image_backoff: CrashLoopBackOff
    metrics: PodMetrics
    node: NodeSettings
    events: EventRecorder
    probe_results: ProbeResults
    volumes: VolumeManager | None = None  # None: made from node.root_dir
    # The pods' cgroups and their containers' resources (None: none, nothing passed to CRI).
    containers: ContainerManager | None = None
    # Pulls at once on the node (serializeImagePulls: 1; maxParallelImagePulls); None: unbounded.
    image_pulls: trio.CapacityLimiter | None = None
    # Pods between their sandbox's creation and their containers' start on the node
    # (None: unbounded, as the Go kubelet): see PARALLEL_POD_STARTS.
    pod_starts: trio.CapacityLimiter | None = None
    # Cluster mode: the ConfigMaps, Secrets and Services pods read (None: standalone).
    objects: ObjectCache | None = None
    # The PLEG's view: a sync of a pod the runtime holds nothing of skips reading it.
    runtime_pods: RuntimePods | None = None
    probe_manager: str = "root/probes/manager"  # where ProbeTargets go
    resync_period: float = 60.0  # --sync-frequency
    status_manager: str = "root/status-manager"  # cluster mode: told when a pod is gone
    # Containers whose preStop hook has run: a hook runs once per container, even when two
    # terminations of a pod race (an event and housekeeping); forgotten when it is removed.
    prestop_done: set[str] = field(default_factory=set)
