"""gRPC status codes and the error a failed call raises: the code's name (as grpc's
StatusCode names it), the server's message, and whether the connection was up."""

from __future__ import annotations

import urllib.parse

# The gRPC status codes, by number (grpc/doc/statuscodes.md).
CODE_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)

# An HTTP/2 RST_STREAM's error code as the call's status (gRPC's PROTOCOL-HTTP2.md).
_RESET_CODES = {7: "UNAVAILABLE", 8: "CANCELLED", 11: "RESOURCE_EXHAUSTED", 12: "PERMISSION_DENIED"}

# A response without grpc-status: its HTTP status as the call's status (the same document).
_HTTP_CODES = {400: "INTERNAL", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
               404: "UNIMPLEMENTED", 429: "UNAVAILABLE", 502: "UNAVAILABLE",
               503: "UNAVAILABLE", 504: "UNAVAILABLE"}


class RpcError(Exception):
    """A call that did not end with status OK. `code` is the status code's name;
    `connected` says whether the call's HTTP/2 connection had been set up (the server's
    SETTINGS seen) when it failed: a deadline hit before that means no gRPC server
    answered."""


    def __init__(self, code: str, details: str, *, connected: bool, retryable: bool = False) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details
        self.connected = connected
        # The server never processed the call (a stream past its GOAWAY, REFUSED_STREAM,
        # a connection that took no new call): it may be made again on a new connection.
        self.retryable = retryable


def deadline_exceeded(*, connected: bool) -> RpcError:
    return RpcError("DEADLINE_EXCEEDED", "Deadline Exceeded", connected=connected)


def code_name(value: bytes) -> str:
    """grpc-status's value as a code name; a number gRPC does not define is UNKNOWN."""
    try:
        number = int(value)
    except ValueError:
        return "UNKNOWN"
    return CODE_NAMES[number] if 0 <= number < len(CODE_NAMES) else "UNKNOWN"


def reset_code(error_code: int) -> str:
    return _RESET_CODES.get(error_code, "INTERNAL")


def http_code(status: int) -> str:
    return _HTTP_CODES.get(status, "UNKNOWN")


def message(value: bytes) -> str:
    """grpc-message: percent-encoded UTF-8."""
    return urllib.parse.unquote(value.decode("ascii", "replace"), errors="replace")
