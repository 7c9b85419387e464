"""A gRPC client for trio on a unix socket: HTTP/2 and HPACK written for it, no thread and
no other event loop (the CRI port's transport; docs/architecture.md says why)."""

from .channel import Channel
from .status import CODE_NAMES, RpcError

__all__ = ["CODE_NAMES", "Channel", "RpcError"]
