"""Typed CRI errors: what went wrong talking to the container runtime, and what to do.

classify() turns a gRPC status into one of these; it is pure so that each mapping is unit
tested without a runtime. Every message names the endpoint and the CRI operation.
"""

from __future__ import annotations

_FIX_ENDPOINT = "is containerd running? start it or pass --container-runtime-endpoint"


class CriError(Exception):
    """Base of every error from the CRI port."""

    def __init__(self, message: str, *, endpoint: str, operation: str, code: str | None = None):
        super().__init__(message)
        self.endpoint = endpoint
        self.operation = operation
        self.code = code  # the gRPC status code name, when there was one


class RuntimeUnavailable(CriError):
    """Nothing answers on the socket: missing, refused, reset, or no gRPC server behind it."""

    def __init__(self, *, endpoint: str, operation: str, detail: str, code: str | None = None):
        super().__init__(
            f"CRI {operation}: no CRI runtime answers at {endpoint}: {detail}; {_FIX_ENDPOINT}",
            endpoint=endpoint, operation=operation, code=code,
        )
        self.detail = detail


class RuntimeTimeout(CriError):
    """The runtime took the call but did not answer within the deadline."""

    def __init__(self, *, endpoint: str, operation: str, timeout: float | None):
        limit = "its deadline" if timeout is None else f"{timeout:g}s"
        super().__init__(
            f"CRI {operation}: the runtime at {endpoint} did not answer within {limit} "
            "(--runtime-request-timeout)",
            endpoint=endpoint, operation=operation, code="DEADLINE_EXCEEDED",
        )
        self.timeout = timeout


class NotCriRuntime(CriError):
    """Something answers on the socket, but not the CRI v1 API."""

    def __init__(self, *, endpoint: str, operation: str, detail: str, code: str | None = None):
        super().__init__(
            f"CRI {operation}: {endpoint} answers but is not a CRI v1 runtime ({detail}); "
            "pass the socket of a CRI runtime such as containerd with "
            "--container-runtime-endpoint",
            endpoint=endpoint, operation=operation, code=code,
        )
        self.detail = detail


class CriCallError(CriError):
    """The runtime answered the call with an error status (the gRPC code name is `code`)."""

    def __init__(self, *, endpoint: str, operation: str, code: str, detail: str):
        super().__init__(
            f"CRI {operation} on {endpoint} failed: {code}: {detail}",
            endpoint=endpoint, operation=operation, code=code,
        )
        self.detail = detail


class CriNotFound(CriCallError):
    """NOT_FOUND: the sandbox, container or image named in the call does not exist."""


class EventsUnsupported(CriCallError):
    """GetContainerEvents is UNIMPLEMENTED: the runtime offers no container event stream
    (containerd before 1.7); the kubelet relies on relisting alone."""


class CommandTimedOut(CriError):
    """exec_sync: the command did not finish within its timeout (a failed exec probe)."""

    def __init__(self, *, endpoint: str, cmd: list[str], timeout: float):
        super().__init__(
            f"CRI exec_sync on {endpoint}: command {' '.join(cmd)!r} timed out after {timeout:g}s",
            endpoint=endpoint, operation="exec_sync", code="DEADLINE_EXCEEDED",
        )
        self.cmd = cmd
        self.timeout = timeout


def classify(
    code: str,
    details: str,
    *,
    endpoint: str,
    operation: str,
    timeout: float | None,
    connected: bool,
) -> CriError:
    """Map a failed call's gRPC status (`code`, the status code's name) to a CriError.

    `connected` says whether the channel had an HTTP/2 connection when the call failed: a
    deadline hit while still connecting means nothing speaks gRPC on the socket, not that the
    runtime is slow.
    """
    name = code
    if code == "UNAVAILABLE":
        if "http1.x server" in details or "Failed parsing HTTP/2" in details:
            return NotCriRuntime(endpoint=endpoint, operation=operation, code=name,
                                 detail="it speaks HTTP/1.x, not gRPC")
        return RuntimeUnavailable(endpoint=endpoint, operation=operation, code=name,
                                  detail=_connect_detail(details))
    if code == "DEADLINE_EXCEEDED":
        if not connected:
            return RuntimeUnavailable(
                endpoint=endpoint, operation=operation, code=name,
                detail="the socket accepts connections but no gRPC server answered"
                + ("" if timeout is None else f" within {timeout:g}s"),
            )
        return RuntimeTimeout(endpoint=endpoint, operation=operation, timeout=timeout)
    if code == "UNIMPLEMENTED" and operation == "version":
        return NotCriRuntime(endpoint=endpoint, operation=operation, code=name,
                             detail=f"Version is UNIMPLEMENTED: {details}")
    if code == "UNIMPLEMENTED" and operation == "get_container_events":
        return EventsUnsupported(endpoint=endpoint, operation=operation, code=name, detail=details)
    if code == "NOT_FOUND":
        return CriNotFound(endpoint=endpoint, operation=operation, code=name, detail=details)
    return CriCallError(endpoint=endpoint, operation=operation, code=name, detail=details)


def _connect_detail(details: str) -> str:
    # grpc-core says "failed to connect to all addresses; last error: FAILED_PRECONDITION:
    # unix:/x.sock: connect failed: addr: unix:/x.sock error: No such file or directory";
    # the operator needs the last part only.
    if "error: " in details:
        return "connect: " + details.rsplit("error: ", 1)[1]
    return details or "connection failed"
