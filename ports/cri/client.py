"""CriClient: the kubelet's typed async port to a CRI runtime (RuntimeService + ImageService).

grpc.aio over a unix socket, on the process's grpc loop thread (ports/grpc_loop.py), called
from trio with one wake-up per answer. Each call gets a deadline, is recorded in
RuntimeOperationMetrics under the Go kubelet's operation_type names, and fails with a typed
CriError (see errors.py); nothing of asyncio (its CancelledError included) gets past it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
import trio
from cri_api.v1 import api_pb2, api_pb2_grpc

from .. import grpc_loop
from .errors import CommandTimedOut, CriError, NotCriRuntime, RuntimeUnavailable, classify
from .metrics import RuntimeOperationMetrics
from .types import ExecSyncResult, RuntimeCondition, RuntimeStatus, RuntimeVersion

T = TypeVar("T")

DEFAULT_REQUEST_TIMEOUT = 120.0  # the Go kubelet's --runtime-request-timeout (2m)
CRI_API_VERSION = "v1"  # the CRI API this client speaks (runtime.v1)
# VersionRequest.version: the kubelet's runtime API version, as the Go kubelet sends it.
KUBELET_RUNTIME_API_VERSION = "0.1.0"

_REQUEST_TIMEOUT: Any = object()  # _call's default: the client's request_timeout

_MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # as the Go kubelet's CRI client (maxMsgSize)
_CHANNEL_OPTIONS = [
    ("grpc.default_authority", "localhost"),
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    # Reconnect quickly after a runtime restart, as the Go kubelet (backoff from 100 ms up
    # to 3 s, 5 s minimum connect timeout; grpc-core reads min_reconnect_backoff_ms as the
    # latter). Calls do not wait for a connection (wait_for_ready=False): while the channel
    # backs off, every call fails at once with UNAVAILABLE.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 3000),
    ("grpc.min_reconnect_backoff_ms", 5000),
    # A channel of its own connection: grpc-core otherwise shares one subchannel among the
    # channels to an address, so the runtime link's new channel after an outage inherited
    # the old one's reconnect back-off on top of the link's own (up to 6 s after
    # containerd was back instead of 3 s).
    ("grpc.use_local_subchannel_pool", 1),
]


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


class CriClient:
    """A connection to one CRI runtime. Use as `async with CriClient(...) as cri:`.

    Call from trio code. Calls are safe to make concurrently from several trio tasks;
    cancelling the calling trio task cancels the RPC.
    """

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
        self._channel: grpc.aio.Channel | None = None
        self._runtime: api_pb2_grpc.RuntimeServiceStub | None = None
        self._images: api_pb2_grpc.ImageServiceStub | None = None

    # -- connection -------------------------------------------------------------------

    async def connect(self) -> RuntimeVersion:
        """Open the channel and do the CRI v1 Version handshake (RuntimeUnavailable,
        NotCriRuntime or RuntimeTimeout when the endpoint is not a working CRI runtime)."""
        if self._channel is None:
            self._channel = await grpc_loop.run(self._open_channel)
            self._runtime = api_pb2_grpc.RuntimeServiceStub(self._channel)
            self._images = api_pb2_grpc.ImageServiceStub(self._channel)
        try:
            self.runtime_version = await self.version()
        except BaseException:
            await self.close()
            raise
        return self.runtime_version

    async def close(self) -> None:
        """Close the channel (calls in flight, and calls after it, fail with
        RuntimeUnavailable). Idempotent."""
        channel, self._channel = self._channel, None
        self._runtime = self._images = None
        if channel is not None:
            with trio.CancelScope(shield=True):  # also closes when the caller is cancelled
                await grpc_loop.run(channel.close)

    async def __aenter__(self) -> CriClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _open_channel(self) -> grpc.aio.Channel:
        # grpc.aio binds a channel to the running asyncio loop, so create it inside it.
        return grpc.aio.insecure_channel(self.endpoint, options=_CHANNEL_OPTIONS)

    # -- RuntimeService ---------------------------------------------------------------

    async def version(self) -> RuntimeVersion:
        response = await self._call(
            "version", self._rt().Version, api_pb2.VersionRequest(version=KUBELET_RUNTIME_API_VERSION)
        )
        missing = [
            field for field in ("version", "runtime_name", "runtime_version", "runtime_api_version")
            if not getattr(response, field)
        ]
        if missing:
            raise NotCriRuntime(endpoint=self.endpoint, operation="version",
                                detail=f"VersionResponse lacks {', '.join(missing)}")
        return RuntimeVersion(
            runtime_name=response.runtime_name,
            runtime_version=response.runtime_version,
            runtime_api_version=response.runtime_api_version,
            version=response.version,
        )

    async def status(self, verbose: bool = False) -> RuntimeStatus:
        response = await self._call(
            "status", self._rt().Status, api_pb2.StatusRequest(verbose=verbose)
        )
        return RuntimeStatus(
            conditions=[
                RuntimeCondition(type=c.type, status=c.status, reason=c.reason, message=c.message)
                for c in response.status.conditions
            ],
            info=dict(response.info),
        )

    async def run_pod_sandbox(
        self, config: api_pb2.PodSandboxConfig, runtime_handler: str = ""
    ) -> str:
        """Returns the new sandbox's id. Twice the request timeout, as the Go kubelet."""
        response = await self._call(
            "run_podsandbox", self._rt().RunPodSandbox,
            api_pb2.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler),
            timeout=2 * self.request_timeout,
        )
        return response.pod_sandbox_id

    async def stop_pod_sandbox(self, pod_sandbox_id: str) -> None:
        await self._call(
            "stop_podsandbox", self._rt().StopPodSandbox,
            api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
        )

    async def remove_pod_sandbox(self, pod_sandbox_id: str) -> None:
        await self._call(
            "remove_podsandbox", self._rt().RemovePodSandbox,
            api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
        )

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, verbose: bool = False
    ) -> api_pb2.PodSandboxStatusResponse:
        return await self._call(
            "podsandbox_status", self._rt().PodSandboxStatus,
            api_pb2.PodSandboxStatusRequest(pod_sandbox_id=pod_sandbox_id, verbose=verbose),
        )

    async def list_pod_sandbox(
        self, filter: api_pb2.PodSandboxFilter | None = None
    ) -> list[api_pb2.PodSandbox]:
        response = await self._call(
            "list_podsandbox", self._rt().ListPodSandbox,
            api_pb2.ListPodSandboxRequest(filter=filter),
        )
        return list(response.items)

    async def create_container(
        self,
        pod_sandbox_id: str,
        config: api_pb2.ContainerConfig,
        sandbox_config: api_pb2.PodSandboxConfig,
    ) -> str:
        """Returns the new container's id."""
        response = await self._call(
            "create_container", self._rt().CreateContainer,
            api_pb2.CreateContainerRequest(
                pod_sandbox_id=pod_sandbox_id, config=config, sandbox_config=sandbox_config
            ),
        )
        return response.container_id

    async def start_container(self, container_id: str) -> None:
        await self._call(
            "start_container", self._rt().StartContainer,
            api_pb2.StartContainerRequest(container_id=container_id),
        )

    async def stop_container(self, container_id: str, timeout: int) -> None:
        """Stop with a grace period of `timeout` seconds (TERM, then KILL); the call's own
        deadline is the request timeout plus the grace period, as in the Go kubelet."""
        await self._call(
            "stop_container", self._rt().StopContainer,
            api_pb2.StopContainerRequest(container_id=container_id, timeout=timeout),
            timeout=self.request_timeout + timeout,
        )

    async def update_container_resources(
        self, container_id: str, linux: api_pb2.LinuxContainerResources
    ) -> None:
        """Apply new cpu/memory limits to a running container (in-place resize)."""
        await self._call(
            "update_container_resources", self._rt().UpdateContainerResources,
            api_pb2.UpdateContainerResourcesRequest(container_id=container_id, linux=linux),
        )

    async def remove_container(self, container_id: str) -> None:
        await self._call(
            "remove_container", self._rt().RemoveContainer,
            api_pb2.RemoveContainerRequest(container_id=container_id),
        )

    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None
    ) -> list[api_pb2.Container]:
        response = await self._call(
            "list_containers", self._rt().ListContainers,
            api_pb2.ListContainersRequest(filter=filter),
        )
        return list(response.containers)

    async def list_pod_sandbox_and_containers(
        self, sandbox_filter: api_pb2.PodSandboxFilter, container_filter: api_pb2.ContainerFilter
    ) -> tuple[Sequence[api_pb2.PodSandbox], Sequence[api_pb2.Container]]:
        """ListPodSandbox and ListContainers side by side, in one trip to the grpc loop and
        one wake-up back (the PLEG's relist): on a busy node every wake-up waits for a CPU,
        and the runtime answers both at once. Each call is recorded and fails as alone.

        The answers' repeated fields, not lists: iterated, protobuf makes each item's Python
        object as it is reached and frees it after, where a list holds a thousand at once at
        500 pods and sets off the cyclic collector at every relist."""
        sandboxes, containers = await self._calls(
            ("list_podsandbox", self._rt().ListPodSandbox, api_pb2.ListPodSandboxRequest(filter=sandbox_filter)),
            ("list_containers", self._rt().ListContainers, api_pb2.ListContainersRequest(filter=container_filter)),
        )
        return sandboxes.items, containers.containers

    async def container_status(
        self, container_id: str, verbose: bool = False
    ) -> api_pb2.ContainerStatusResponse:
        return await self._call(
            "container_status", self._rt().ContainerStatus,
            api_pb2.ContainerStatusRequest(container_id=container_id, verbose=verbose),
        )

    async def reopen_container_log(self, container_id: str) -> None:
        """Have the runtime reopen the container's log at its path, creating the file anew
        after the kubelet renamed it (log rotation). Runtimes refuse it for a container
        that is not running."""
        await self._call(
            "reopen_container_log", self._rt().ReopenContainerLog,
            api_pb2.ReopenContainerLogRequest(container_id=container_id),
        )

    async def list_container_stats(
        self, filter: api_pb2.ContainerStatsFilter | None = None
    ) -> list[api_pb2.ContainerStats]:
        """Every container's cpu, memory and writable layer in one call. containerd 1.6
        asks each container's shim in turn: about 0.7 ms per container."""
        response = await self._call(
            "list_container_stats", self._rt().ListContainerStats,
            api_pb2.ListContainerStatsRequest(filter=filter),
        )
        return list(response.stats)

    async def container_stats(self, container_id: str) -> api_pb2.ContainerStats:
        response = await self._call(
            "container_stats", self._rt().ContainerStats,
            api_pb2.ContainerStatsRequest(container_id=container_id),
        )
        return response.stats

    async def list_pod_sandbox_stats(
        self, filter: api_pb2.PodSandboxStatsFilter | None = None
    ) -> list[api_pb2.PodSandboxStats]:
        """Every pod's cpu, memory, network, processes and its containers' stats. containerd
        1.6 fails the whole call (UNKNOWN "cgroupPath is empty") when one sandbox was run
        without a cgroup parent; runtimes before it answer UNIMPLEMENTED."""
        response = await self._call(
            "list_podsandbox_stats", self._rt().ListPodSandboxStats,
            api_pb2.ListPodSandboxStatsRequest(filter=filter),
        )
        return list(response.stats)

    async def exec_sync(
        self, container_id: str, cmd: Sequence[str], timeout: float
    ) -> ExecSyncResult:
        """Run `cmd` in the container and wait for it. A non-zero exit is a result, not an
        error. `timeout` (seconds, rounded up; 0 = none) bounds the command: past it,
        CommandTimedOut. The call's deadline is the request timeout plus `timeout`."""
        seconds = math.ceil(timeout) if timeout > 0 else 0
        try:
            response = await self._call(
                "exec_sync", self._rt().ExecSync,
                api_pb2.ExecSyncRequest(container_id=container_id, cmd=list(cmd), timeout=seconds),
                timeout=self.request_timeout + seconds if seconds else None,
            )
        except CriError as error:
            if error.code == "DEADLINE_EXCEEDED" and seconds:
                raise CommandTimedOut(endpoint=self.endpoint, cmd=list(cmd), timeout=timeout) from error
            raise
        return ExecSyncResult(
            stdout=response.stdout, stderr=response.stderr, exit_code=response.exit_code
        )

    async def exec(
        self, container_id: str, cmd: Sequence[str], *,
        stdin: bool, stdout: bool, stderr: bool, tty: bool,
    ) -> str:
        """The runtime's streaming URL for running `cmd` in the container (kubectl exec):
        single use, on the runtime's streaming server, which the kubelet proxies to. The
        runtime refuses tty with stderr, and a request with none of stdin/stdout/stderr."""
        return await self._streaming_url(
            "exec", self._rt().Exec,
            api_pb2.ExecRequest(
                container_id=container_id, cmd=list(cmd),
                stdin=stdin, stdout=stdout, stderr=stderr, tty=tty,
            ),
        )

    async def attach(
        self, container_id: str, *, stdin: bool, stdout: bool, stderr: bool, tty: bool
    ) -> str:
        """The runtime's streaming URL for attaching to the container's main process."""
        return await self._streaming_url(
            "attach", self._rt().Attach,
            api_pb2.AttachRequest(
                container_id=container_id, stdin=stdin, stdout=stdout, stderr=stderr, tty=tty
            ),
        )

    async def port_forward(self, pod_sandbox_id: str, ports: Sequence[int]) -> str:
        """The runtime's streaming URL for forwarding to `ports` in the sandbox's network
        namespace."""
        return await self._streaming_url(
            "port_forward", self._rt().PortForward,
            api_pb2.PortForwardRequest(pod_sandbox_id=pod_sandbox_id, port=list(ports)),
        )

    async def _streaming_url(self, operation: str, rpc: Callable[..., Awaitable[Any]], request: Any) -> str:
        response = await self._call(operation, rpc, request)
        if not response.url:
            # A failed operation, as the Go kubelet's CRI client counts it ("URL is not set").
            if self.metrics is not None:
                self.metrics.errors.labels(operation).inc()
            raise CriError(
                f"CRI {operation} on {self.endpoint} failed: the runtime answered without a "
                "streaming URL",
                endpoint=self.endpoint, operation=operation,
            )
        return response.url

    async def container_events(self) -> AsyncIterator[api_pb2.ContainerEventResponse]:
        """The runtime's container events (GetContainerEvents), as they happen, until the
        runtime ends the stream (the iterator ends) or it fails (a CriError; UNIMPLEMENTED is
        EventsUnsupported). No deadline: cancelling the calling trio task cancels the stream.

        An async generator: iterate it in one trio task, inside
        `async with contextlib.aclosing(cri.container_events()) as events:` so that leaving
        the block cancels the stream at once. The stream counts as one get_container_events
        operation, recorded when it ends (as the Go kubelet records it).
        """
        operation = "get_container_events"
        channel = self._channel
        call = await grpc_loop.run(
            _open_stream, self._rt().GetContainerEvents, api_pb2.GetEventsRequest(), discard=_cancel_call
        )
        started = time.perf_counter()
        failed = False
        try:
            while True:
                # One read on the loop per message: a cancelled trio task cancels the read,
                # and grpc.aio cancels the call with it.
                try:
                    event = await grpc_loop.run(_read, call, channel)
                except _RpcFailed as failure:
                    failed = True
                    raise failure.classify(self.endpoint, operation, timeout=None) from failure.error
                except grpc_loop.CancelledOnLoop as cancelled:
                    failed = True
                    raise self._closed_during(operation) from cancelled
                if event is grpc.aio.EOF:
                    return
                yield event
        finally:
            grpc_loop.call_soon(call.cancel)  # a no-op once the stream ended; otherwise tells the runtime
            if self.metrics is not None:
                self.metrics.record(operation, time.perf_counter() - started, failed=failed)

    # -- ImageService -----------------------------------------------------------------

    async def list_images(self, filter: api_pb2.ImageFilter | None = None) -> list[api_pb2.Image]:
        response = await self._call(
            "list_images", self._img().ListImages, api_pb2.ListImagesRequest(filter=filter)
        )
        return list(response.images)

    async def image_status(
        self, image: str, verbose: bool = False
    ) -> api_pb2.ImageStatusResponse:
        """`.image` is unset (HasField("image") is False) when the runtime lacks the image."""
        return await self._call(
            "image_status", self._img().ImageStatus,
            api_pb2.ImageStatusRequest(image=api_pb2.ImageSpec(image=image), verbose=verbose),
        )

    async def pull_image(
        self,
        image: str,
        auth: api_pb2.AuthConfig | None = None,
        sandbox_config: api_pb2.PodSandboxConfig | None = None,
    ) -> str:
        """Returns the pulled image's reference. No deadline: pulls may take long (as in the
        Go kubelet); cancel the calling trio task to give up."""
        response = await self._call(
            "pull_image", self._img().PullImage,
            api_pb2.PullImageRequest(
                image=api_pb2.ImageSpec(image=image), auth=auth, sandbox_config=sandbox_config
            ),
            timeout=None,
        )
        return response.image_ref

    async def remove_image(self, image: str) -> None:
        await self._call(
            "remove_image", self._img().RemoveImage,
            api_pb2.RemoveImageRequest(image=api_pb2.ImageSpec(image=image)),
        )

    async def image_fs_info(self) -> api_pb2.ImageFsInfoResponse:
        return await self._call(
            "image_fs_info", self._img().ImageFsInfo, api_pb2.ImageFsInfoRequest()
        )

    # -- the one place a call happens -------------------------------------------------

    async def _call(
        self,
        operation: str,
        rpc: Callable[..., Awaitable[T]],
        request: Any,
        *,
        timeout: float | None | object = _REQUEST_TIMEOUT,
    ) -> T:
        deadline = self.request_timeout if timeout is _REQUEST_TIMEOUT else timeout
        started = time.perf_counter()
        failed = True
        try:
            response = await grpc_loop.run(_invoke, rpc, request, deadline, self._channel)
            failed = False
            return response
        except _RpcFailed as failure:
            raise failure.classify(self.endpoint, operation, timeout=deadline) from failure.error
        except grpc_loop.CancelledOnLoop as cancelled:
            raise self._closed_during(operation) from cancelled
        finally:
            if self.metrics is not None:
                self.metrics.record(operation, time.perf_counter() - started, failed=failed)

    async def _calls(self, *calls: tuple[str, Callable[..., Awaitable[Any]], Any]) -> list[Any]:
        """Unary calls made at once with the request timeout, as _call makes one: the
        answers in order, or the first call's error that failed. Each call is recorded with
        the time the caller waited for all of them."""
        deadline = self.request_timeout
        started = time.perf_counter()
        results: list[Any] | None = None
        try:
            results = await grpc_loop.run(_invoke_all, [(rpc, request) for _, rpc, request in calls],
                                          deadline, self._channel)
        except grpc_loop.CancelledOnLoop as cancelled:
            raise self._closed_during(calls[0][0]) from cancelled
        finally:
            if self.metrics is not None:
                elapsed = time.perf_counter() - started
                for i, (operation, _, _) in enumerate(calls):
                    failed = results is None or isinstance(results[i], _RpcFailed)
                    self.metrics.record(operation, elapsed, failed=failed)
        for (operation, _, _), result in zip(calls, results):
            if isinstance(result, _RpcFailed):
                raise result.classify(self.endpoint, operation, timeout=deadline) from result.error
        return results

    def _rt(self) -> api_pb2_grpc.RuntimeServiceStub:
        if self._runtime is None:
            raise self._not_connected()
        return self._runtime

    def _img(self) -> api_pb2_grpc.ImageServiceStub:
        if self._images is None:
            raise self._not_connected()
        return self._images

    def _closed_during(self, operation: str) -> RuntimeUnavailable:
        # grpc.aio cancels the calls in flight when the channel closes (the runtime link
        # ending its session); the grpc loop hands that on as CancelledOnLoop: a failed
        # call. (A cancelled trio task gets trio.Cancelled, never this.)
        return RuntimeUnavailable(
            endpoint=self.endpoint, operation=operation, detail="the connection was closed during the call"
        )

    def _not_connected(self) -> Exception:
        if self.runtime_version is not None:
            # Closed by its owner (the runtime link) while another actor was between calls:
            # a failed call like any other, not a programming error.
            return RuntimeUnavailable(endpoint=self.endpoint, operation="call", detail="the connection was closed")
        return RuntimeError(f"CriClient({self.endpoint}) is not connected: call connect()")


class _RpcFailed(Exception):
    """A call's gRPC error status, with whether the channel was connected when it failed
    (read on the loop, beside the channel)."""

    def __init__(self, error: grpc.aio.AioRpcError, connected: bool) -> None:
        super().__init__(error)
        self.error = error
        self.connected = connected

    def classify(self, endpoint: str, operation: str, *, timeout: float | None) -> CriError:
        return classify(
            self.error.code(), self.error.details() or "",
            endpoint=endpoint, operation=operation, timeout=timeout, connected=self.connected,
        )


def _failed(error: grpc.aio.AioRpcError, channel: grpc.aio.Channel | None) -> _RpcFailed:
    connected = channel is not None and channel.get_state() == grpc.ChannelConnectivity.READY
    return _RpcFailed(error, connected)


async def _invoke(
    rpc: Callable[..., Awaitable[T]], request: Any, timeout: float | None, channel: grpc.aio.Channel | None
) -> T:
    # On the loop. wait_for_ready=False: fail at once with UNAVAILABLE when the runtime is
    # not there, instead of queueing the call until its deadline.
    try:
        return await rpc(request, timeout=timeout, wait_for_ready=False)
    except grpc.aio.AioRpcError as error:
        raise _failed(error, channel) from None


async def _invoke_all(
    calls: list[tuple[Callable[..., Awaitable[Any]], Any]], timeout: float | None, channel: grpc.aio.Channel | None
) -> list[Any]:
    # On the loop: every call in flight at once; a failed one is returned, not raised, so
    # that the others still end (and are recorded) as they would alone.
    async def one(rpc: Callable[..., Awaitable[Any]], request: Any) -> Any:
        try:
            return await _invoke(rpc, request, timeout, channel)
        except _RpcFailed as failure:
            return failure

    return list(await asyncio.gather(*(one(rpc, request) for rpc, request in calls)))


async def _open_stream(rpc: Callable[..., Any], request: Any) -> Any:
    # grpc.aio starts the call on the running asyncio loop, so create it on the loop.
    return rpc(request, timeout=None, wait_for_ready=False)


def _cancel_call(call: Any) -> None:
    # On the loop: a stream opened for a trio task cancelled meanwhile would stay open on
    # the runtime until the channel closes.
    call.cancel()


async def _read(call: Any, channel: grpc.aio.Channel | None) -> Any:
    try:
        return await call.read()
    except grpc.aio.AioRpcError as error:
        raise _failed(error, channel) from None
