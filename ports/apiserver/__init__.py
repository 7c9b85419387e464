"""The API-server port: kubeconfig loading, an async client of the Kubernetes API (httpx
on trio) with client-go's rate limit and metrics, watches, and typed errors.

The client (client.py, and with it httpx) and the kubeconfig loader (kubeconfig.py) are
imported when one of their names is first asked for: a standalone kubelet, which has no API
server, never loads them."""

import importlib
from typing import TYPE_CHECKING

from .errors import (
    AlreadyExists,
    ApiError,
    ApiUnavailable,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ProtocolError,
    RequestInfo,
    ServerError,
    TooManyRequests,
    Unauthorized,
    error_from_status,
    request_info,
    unavailable,
)
from .metrics import REQUEST_DURATION_BUCKETS, RestClientMetrics
from .objects import PATCH_CONTENT_TYPES, PatchType, decode
from .ratelimit import TokenBucket
from .reachability import ApiReachability
from .watch import WatchDecoder, WatchEvent

_LAZY = {
    **dict.fromkeys(("DEFAULT_BURST", "DEFAULT_QPS", "DEFAULT_TIMEOUT", "DEFAULT_WATCH_READ_TIMEOUT", "ApiClient",
                     "WatchStream", "default_user_agent"), ".client"),
    **dict.fromkeys(("ClientCertificate", "Credentials", "KubeconfigError", "load_kubeconfig"), ".kubeconfig"),
}

if TYPE_CHECKING:
    from .client import (
        DEFAULT_BURST,
        DEFAULT_QPS,
        DEFAULT_TIMEOUT,
        DEFAULT_WATCH_READ_TIMEOUT,
        ApiClient,
        WatchStream,
        default_user_agent,
    )
    from .kubeconfig import ClientCertificate, Credentials, KubeconfigError, load_kubeconfig


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(module, __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DEFAULT_BURST",
    "DEFAULT_QPS",
    "DEFAULT_TIMEOUT",
    "DEFAULT_WATCH_READ_TIMEOUT",
    "PATCH_CONTENT_TYPES",
    "REQUEST_DURATION_BUCKETS",
    "AlreadyExists",
    "ApiClient",
    "ApiReachability",
    "ApiError",
    "ApiUnavailable",
    "ClientCertificate",
    "Conflict",
    "Credentials",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeconfigError",
    "NotFound",
    "PatchType",
    "ProtocolError",
    "RequestInfo",
    "RestClientMetrics",
    "ServerError",
    "TokenBucket",
    "TooManyRequests",
    "Unauthorized",
    "WatchDecoder",
    "WatchEvent",
    "WatchStream",
    "decode",
    "default_user_agent",
    "error_from_status",
    "load_kubeconfig",
    "request_info",
    "unavailable",
]
