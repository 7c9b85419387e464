"""What every pod worker shares: the runtime connection, the status board, the back-offs
(kept across worker restarts, as the Go kubelet keeps them for the kubelet's life), the
metrics and the node's settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from pykubelet.actors.events import EventRecorder
from pykubelet.actors.pleg import RuntimePods
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.probes.results import ProbeResults
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.pods.backoff import CrashLoopBackOff

from .metrics import PodMetrics


@dataclass(frozen=True)
class NodeSettings:
    name: str
    host_ip: str
    root_dir: str
    pod_logs_dir: str


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
    # The PLEG's view: a sync of a pod the runtime holds nothing of skips reading it.
    runtime_pods: RuntimePods | None = None
    probe_manager: str = "root/probes/manager"  # where ProbeTargets go
    resync_period: float = 60.0  # --sync-frequency
    status_manager: str = "root/status-manager"  # cluster mode: told when a pod is gone
    # Containers whose preStop hook has run: a hook runs once per container, even when two
    # terminations of a pod race (an event and housekeeping); forgotten when it is removed.
    prestop_done: set[str] = field(default_factory=set)
