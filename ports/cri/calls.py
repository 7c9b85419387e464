"""CriCalls: how a CriClient makes a call. One gRPC channel to the runtime's unix socket
(ports/grpc_client); each call gets a deadline, is recorded in RuntimeOperationMetrics
under the Go kubelet's operation_type names, and fails with a typed CriError. The CRI's
typed methods on top are CriClient's (client.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from pykubelet.messages.cri_api import api_pb2

from ..grpc_client import Channel, RpcError
from .errors import CriError, RuntimeUnavailable, classify
from .metrics import RuntimeOperationMetrics
from .types import RuntimeVersion

DEFAULT_REQUEST_TIMEOUT = 120.0  # the Go kubelet's --runtime-request-timeout (2m)
_REQUEST_TIMEOUT: Any = object()  # _call's default: the client's request_timeout
_Answer = TypeVar("_Answer")

MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # as the Go kubelet's CRI client (maxMsgSize), both ways

# Each CRI method's HTTP/2 path and answer type, by method name.
_IMAGE_METHODS = ("ListImages", "ImageStatus", "PullImage", "RemoveImage", "ImageFsInfo")
_RUNTIME_METHODS = (
    "Version", "Status", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "PodSandboxStatus",
    "ListPodSandbox", "CreateContainer", "StartContainer", "StopContainer", "UpdateContainerResources",
    "RemoveContainer", "ListContainers", "ContainerStatus", "ReopenContainerLog", "ListContainerStats",
    "ContainerStats", "ListPodSandboxStats", "ExecSync", "Exec", "Attach", "PortForward",
)
METHODS: dict[str, tuple[bytes, Any]] = {
    name: (f"/runtime.v1.{service}/{name}".encode(), getattr(api_pb2, f"{name}Response"))
    for service, names in (("RuntimeService", _RUNTIME_METHODS), ("ImageService", _IMAGE_METHODS))
    for name in names
}


def normalize_endpoint(endpoint: str) -> str:
    """"unix:///run/x.sock" or "/run/x.sock" -> "unix:///run/x.sock"; other schemes refused."""
    if endpoint.startswith("unix://"):
        path = endpoint[len("unix://"):]
    elif endpoint.startswith("/"):
        path = endpoint
    else:
        raise ValueError(
            f"--container-runtime-endpoint {endpoint!r}: only unix sockets are supported, "
            "as unix:///path/to/socket or /path/to/socket"
        )
    if not path.startswith("/"):
        raise ValueError(
            f"--container-runtime-endpoint {endpoint!r}: the socket path must be absolute "
            "(unix:///run/containerd/containerd.sock)"
        )
    return f"unix://{path}"


class CriCalls:
    """The channel to one CRI runtime and the one place its calls happen."""

    def __init__(
        self,
        endpoint: str,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        metrics: RuntimeOperationMetrics | None = None,
    ) -> None:
        self.endpoint = normalize_endpoint(endpoint)
        self.request_timeout = request_timeout
        self.metrics = metrics
        self.runtime_version: RuntimeVersion | None = None  # set by connect()
        self._channel: Channel | None = None

    async def close(self) -> None:
        """Close the channel (calls in flight, and calls after it, fail with
        RuntimeUnavailable). Idempotent."""
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    # -- the one place a call happens -------------------------------------------------

    async def _call(
        self,
        operation: str,
        method: str,
        request: Any,
        *,
        timeout: float | None | object = _REQUEST_TIMEOUT,
    ) -> Any:
        path, answer = METHODS[method]
        return await self._serialized_call(operation, path, request.SerializeToString(), answer.FromString,
                                           timeout=timeout)

    async def _serialized_call(
        self,
        operation: str,
        path: bytes,
        request: bytes,
        read: Callable[[bytes], _Answer],
        *,
        timeout: float | None | object = _REQUEST_TIMEOUT,
    ) -> _Answer:
        """A call whose request is serialized already; `read` makes its answer of the bytes."""
        deadline = self.request_timeout if timeout is _REQUEST_TIMEOUT else timeout
        channel = self._connected()  # not connected: not a call, not recorded
        started = time.perf_counter()
        failed = True
        try:
            response = read(await channel.unary(path, request, deadline))
            failed = False
            return response
        except RpcError as error:
            raise self._classify(error, operation, timeout=deadline) from error
        finally:
            if self.metrics is not None:
                self.metrics.record(operation, time.perf_counter() - started, failed=failed)

    async def _calls(self, *calls: tuple[str, str, Any]) -> list[Any]:
        """Unary calls made at once with the request timeout, as _call makes one: the
        answers in order, or the first call's error that failed. Each call is recorded with
        the time the caller waited for all of them."""
        deadline = self.request_timeout
        channel = self._connected()
        started = time.perf_counter()
        results: list[bytes | RpcError] | None = None
        try:
            results = await channel.unary_all(
                [(METHODS[method][0], request.SerializeToString()) for _, method, request in calls], deadline
            )
        except RpcError as error:  # the channel could not connect: every call failed alike
            results = [error] * len(calls)
        finally:
            if self.metrics is not None:
                elapsed = time.perf_counter() - started
                for i, (operation, _, _) in enumerate(calls):
                    failed = results is None or isinstance(results[i], RpcError)
                    self.metrics.record(operation, elapsed, failed=failed)
        answers = []
        for (operation, method, _), result in zip(calls, results):
            if isinstance(result, RpcError):
                raise self._classify(result, operation, timeout=deadline) from result
            answers.append(METHODS[method][1].FromString(result))
        return answers

    def _connected(self) -> Channel:
        if self._channel is None:
            raise self._not_connected()
        return self._channel

    def _classify(self, error: RpcError, operation: str, *, timeout: float | None) -> CriError:
        return classify(error.code, error.details, endpoint=self.endpoint, operation=operation,
                        timeout=timeout, connected=error.connected)

    def _not_connected(self) -> Exception:
        if self.runtime_version is not None:
            # Closed by its owner (the runtime link) while another actor was between calls:
            # a failed call like any other, not a programming error.
            return RuntimeUnavailable(endpoint=self.endpoint, operation="call", detail="the connection was closed")
        return RuntimeError(f"CriClient({self.endpoint}) is not connected: call connect()")
