"""Probes (Go: pkg/kubelet/prober): a manager that keeps one worker per running container
x probe kind, the workers, the results board the pod workers read, and the metrics.

Pod workers send ProbeTargets to root/probes/manager; workers send ProbeResult to the sync
loop on every change of a published result. See tree.py for the subtree.
"""

from .manager import ProbeManager, ProbeTarget, parse_worker_name, probe_manager_actor, worker_name
from .metrics import ProbeMetrics
from .results import BoardEntry, ProbeResults
from .tree import MANAGER_MAILBOX, PROBES_BACKOFF, PROBES_INTENSITY, probes_supervisor_spec
from .worker import ProbeWorker, probe_worker_actor

__all__ = [
    "BoardEntry",
    "MANAGER_MAILBOX",
    "PROBES_BACKOFF",
    "PROBES_INTENSITY",
    "ProbeManager",
    "ProbeMetrics",
    "ProbeResults",
    "ProbeTarget",
    "ProbeWorker",
    "parse_worker_name",
    "probe_manager_actor",
    "probe_worker_actor",
    "probes_supervisor_spec",
    "worker_name",
]
