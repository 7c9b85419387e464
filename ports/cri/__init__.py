"""The CRI port: a typed async client for a container runtime's RuntimeService and
ImageService (containerd, or the embedded runtime), its errors and its metrics."""

from .calls import DEFAULT_REQUEST_TIMEOUT, normalize_endpoint
from .client import CRI_API_VERSION, CriClient
from .errors import (
    CommandTimedOut,
    CriCallError,
    CriError,
    CriNotFound,
    EventsUnsupported,
    NotCriRuntime,
    RuntimeTimeout,
    RuntimeUnavailable,
    classify,
)
from .metrics import RUNTIME_OPERATION_BUCKETS, RuntimeOperationMetrics
from .types import ExecSyncResult, RuntimeCondition, RuntimeStatus, RuntimeVersion

__all__ = [
    "CRI_API_VERSION",
    "DEFAULT_REQUEST_TIMEOUT",
    "CommandTimedOut",
    "CriCallError",
    "CriClient",
    "CriError",
    "CriNotFound",
    "EventsUnsupported",
    "ExecSyncResult",
    "NotCriRuntime",
    "RUNTIME_OPERATION_BUCKETS",
    "RuntimeCondition",
    "RuntimeOperationMetrics",
    "RuntimeStatus",
    "RuntimeTimeout",
    "RuntimeUnavailable",
    "RuntimeVersion",
    "classify",
    "normalize_endpoint",
]
