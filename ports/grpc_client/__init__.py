"""A gRPC client for trio: HTTP/2 and HPACK written for it, no thread and no other event
loop (the CRI port's transport and the gRPC probes'; docs/architecture.md says why)."""

from .channel import Channel, unary
from .connection import Connection
from .status import CODE_NAMES, RpcError

__all__ = ["CODE_NAMES", "Channel", "Connection", "RpcError", "unary"]
