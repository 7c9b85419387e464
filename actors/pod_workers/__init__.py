"""Pod workers: a supervisor of dynamic children, one actor per pod UID (see worker.py)."""

from .deps import PARALLEL_POD_STARTS, NodeSettings, PodWorkerDeps
from .metrics import PodMetrics
from .worker import pod_worker_actor

__all__ = ["PARALLEL_POD_STARTS", "NodeSettings", "PodMetrics", "PodWorkerDeps", "pod_worker_actor"]
