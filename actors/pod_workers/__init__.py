"""Pod workers: a supervisor of dynamic children, one actor per pod UID (see worker.py)."""

from .deps import PARALLEL_SANDBOX_CREATIONS, NodeSettings, PodWorkerDeps
from .metrics import PodMetrics
from .worker import pod_worker_actor

__all__ = ["PARALLEL_SANDBOX_CREATIONS", "NodeSettings", "PodMetrics", "PodWorkerDeps", "pod_worker_actor"]
