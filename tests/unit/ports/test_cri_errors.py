"""classify(): each gRPC failure becomes the CriError an operator can act on."""

from __future__ import annotations

import pytest

from pykubelet.ports.cri import (
    RUNTIME_OPERATION_BUCKETS,
    CriCallError,
    CriNotFound,
    NotCriRuntime,
    RuntimeTimeout,
    RuntimeUnavailable,
    classify,
    normalize_endpoint,
)

ENDPOINT = "unix:///run/containerd/containerd.sock"
MISSING = (
    "failed to connect to all addresses; last error: FAILED_PRECONDITION: "
    "unix:/run/containerd/containerd.sock: connect failed: addr: "
    "unix:/run/containerd/containerd.sock error: No such file or directory"
)
HTTP1 = (
    "failed to connect to all addresses; last error: INTERNAL: unix:/x.sock: Failed parsing "
    "HTTP/2 (Expected SETTINGS frame as the first frame, got frame type 80) (Trying to "
    "connect an http1.x server (HTTP status 400))"
)


def classified(code, details="", operation="list_podsandbox", connected=True, timeout=120.0):
    return classify(code, details, endpoint=ENDPOINT, operation=operation, timeout=timeout,
                    connected=connected)


@pytest.mark.parametrize(
    ("code", "details", "operation", "connected", "kind"),
    [
        ("UNAVAILABLE", MISSING, "version", False, RuntimeUnavailable),
        ("UNAVAILABLE", HTTP1, "version", False, NotCriRuntime),
        ("UNAVAILABLE", "Socket closed", "list_podsandbox", True, RuntimeUnavailable),
        ("DEADLINE_EXCEEDED", "Deadline Exceeded", "version", False, RuntimeUnavailable),
        ("DEADLINE_EXCEEDED", "Deadline Exceeded", "status", True, RuntimeTimeout),
        ("UNIMPLEMENTED", "Method not found!", "version", True, NotCriRuntime),
        ("UNIMPLEMENTED", "unknown method", "exec_sync", True, CriCallError),
        ("NOT_FOUND", "container \"x\" not found", "container_status", True, CriNotFound),
        ("UNKNOWN", "failed to create containerd task", "start_container", True, CriCallError),
    ],
)
def test_grpc_status_maps_to_a_typed_error(code, details, operation, connected, kind) -> None:
    error = classified(code, details, operation, connected)
    assert type(error) is kind
    assert error.endpoint == ENDPOINT and error.operation == operation
    assert error.code == code
    assert ENDPOINT in str(error) and operation in str(error)


def test_missing_socket_message_names_the_cause_and_the_fix() -> None:
    message = str(classified("UNAVAILABLE", MISSING, "version", False))
    assert message == (
        f"CRI version: no CRI runtime answers at {ENDPOINT}: connect: No such file or "
        "directory; is containerd running? start it or pass --container-runtime-endpoint"
    )


def test_timeout_message_names_the_limit_and_the_flag() -> None:
    error = classified("DEADLINE_EXCEEDED", "Deadline Exceeded", "status", True, 2.5)
    assert isinstance(error, RuntimeTimeout) and error.timeout == 2.5
    assert "did not answer within 2.5s (--runtime-request-timeout)" in str(error)


def test_not_found_is_a_call_error_carrying_the_code_name() -> None:
    error = classified("NOT_FOUND", "gone", "remove_container")
    assert isinstance(error, CriCallError)
    assert str(error) == f"CRI remove_container on {ENDPOINT} failed: NOT_FOUND: gone"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("unix:///run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        ("/run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
    ],
)
def test_endpoint_accepts_unix_url_or_bare_path(given: str, expected: str) -> None:
    assert normalize_endpoint(given) == expected


@pytest.mark.parametrize("given", ["tcp://127.0.0.1:1234", "run/x.sock", "unix://relative.sock"])
def test_endpoint_other_than_an_absolute_unix_socket_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="--container-runtime-endpoint"):
        normalize_endpoint(given)


def test_duration_buckets_are_the_go_kubelets() -> None:
    # metrics.ExponentialBuckets(.005, 2.5, 14)
    assert len(RUNTIME_OPERATION_BUCKETS) == 14
    assert RUNTIME_OPERATION_BUCKETS[0] == 0.005
    assert RUNTIME_OPERATION_BUCKETS[-1] == pytest.approx(0.005 * 2.5**13)
