"""A gRPC client for trio: HTTP/2 and HPACK written for it, no thread and no other event
loop (the CRI port's transport and the gRPC probes'; docs/architecture.md says why)."""

from .channel import Channel, unary
from .connection import Connection
from .status import RpcError

__all__ = ["Channel", "Connection", "RpcError", "unary"]
