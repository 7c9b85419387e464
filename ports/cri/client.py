"""CriClient: the kubelet's typed async port to a CRI runtime (RuntimeService + ImageService).

gRPC over the runtime's unix socket through ports/grpc_client, driven by trio itself (no
thread, no other event loop); messages are the CRI's protobuf types. Each call gets a
deadline, is recorded in RuntimeOperationMetrics under the Go kubelet's operation_type
names, and fails with a typed CriError (see errors.py); how is CriCalls' (calls.py).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pykubelet.messages.cri_api import api_pb2

from ..grpc_client import Channel, RpcError
from .calls import MAX_MESSAGE_BYTES, METHODS, CriCalls
from .errors import CommandTimedOut, CriError, NotCriRuntime
from .types import ExecSyncResult, RuntimeCondition, RuntimeStatus, RuntimeVersion

CRI_API_VERSION = "v1"  # the CRI API this client speaks (runtime.v1)
# VersionRequest.version: the kubelet's runtime API version, as the Go kubelet sends it.
KUBELET_RUNTIME_API_VERSION = "0.1.0"

_EVENTS = b"/runtime.v1.RuntimeService/GetContainerEvents"
_EXEC_SYNC = METHODS["ExecSync"][0]
# An exec probe makes the same ExecSync every period and mostly gets the same answer: both
# are kept as bytes, so protobuf's encoder and decoder, one of the costliest steps of the
# call (their code is cold again after each period), run once per probe, not per period.
_REMEMBERED_ANSWER = 1024  # bytes: longer answers are read each time, never kept


@functools.lru_cache(maxsize=512)
def _exec_sync_request(container_id: str, cmd: tuple[str, ...], seconds: int) -> bytes:
    return api_pb2.ExecSyncRequest(container_id=container_id, cmd=cmd, timeout=seconds).SerializeToString()


def _exec_sync_result(answer: bytes) -> ExecSyncResult:
    if len(answer) > _REMEMBERED_ANSWER:
        return _read_exec_sync(answer)
    return _remembered_exec_sync(answer)


def _read_exec_sync(answer: bytes) -> ExecSyncResult:
    response = api_pb2.ExecSyncResponse.FromString(answer)
    return ExecSyncResult(stdout=response.stdout, stderr=response.stderr, exit_code=response.exit_code)


_remembered_exec_sync = functools.lru_cache(maxsize=128)(_read_exec_sync)  # ExecSyncResult is frozen


class CriClient(CriCalls):
    """A connection to one CRI runtime. Use as `async with CriClient(...) as cri:`.

    Call from trio code. Calls are safe to make concurrently from several trio tasks;
    cancelling the calling trio task cancels the RPC.
    """

    # -- connection -------------------------------------------------------------------

    async def connect(self) -> RuntimeVersion:
        """Open the channel and do the CRI v1 Version handshake (RuntimeUnavailable,
        NotCriRuntime or RuntimeTimeout when the endpoint is not a working CRI runtime)."""
        if self._channel is None:
            self._channel = Channel(self.endpoint[len("unix://"):], max_message=MAX_MESSAGE_BYTES)
        try:
            self.runtime_version = await self.version()
        except BaseException:
            await self.close()
            raise
        return self.runtime_version

    async def __aenter__(self) -> CriClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- RuntimeService ---------------------------------------------------------------

    async def version(self) -> RuntimeVersion:
        response = await self._call(
            "version", "Version", api_pb2.VersionRequest(version=KUBELET_RUNTIME_API_VERSION)
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
            "status", "Status", api_pb2.StatusRequest(verbose=verbose)
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
            "run_podsandbox", "RunPodSandbox",
            api_pb2.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler),
            timeout=2 * self.request_timeout,
        )
        return response.pod_sandbox_id

    async def stop_pod_sandbox(self, pod_sandbox_id: str) -> None:
        await self._call(
            "stop_podsandbox", "StopPodSandbox",
            api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
        )

    async def remove_pod_sandbox(self, pod_sandbox_id: str) -> None:
        await self._call(
            "remove_podsandbox", "RemovePodSandbox",
            api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
        )

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, verbose: bool = False
    ) -> api_pb2.PodSandboxStatusResponse:
        return await self._call(
            "podsandbox_status", "PodSandboxStatus",
            api_pb2.PodSandboxStatusRequest(pod_sandbox_id=pod_sandbox_id, verbose=verbose),
        )

    async def list_pod_sandbox(
        self, filter: api_pb2.PodSandboxFilter | None = None
    ) -> list[api_pb2.PodSandbox]:
        response = await self._call(
            "list_podsandbox", "ListPodSandbox",
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
            "create_container", "CreateContainer",
            api_pb2.CreateContainerRequest(
                pod_sandbox_id=pod_sandbox_id, config=config, sandbox_config=sandbox_config
            ),
        )
        return response.container_id

    async def start_container(self, container_id: str) -> None:
        await self._call(
            "start_container", "StartContainer",
            api_pb2.StartContainerRequest(container_id=container_id),
        )

    async def stop_container(self, container_id: str, timeout: int) -> None:
        """Stop with a grace period of `timeout` seconds (TERM, then KILL); the call's own
        deadline is the request timeout plus the grace period, as in the Go kubelet."""
        await self._call(
            "stop_container", "StopContainer",
            api_pb2.StopContainerRequest(container_id=container_id, timeout=timeout),
            timeout=self.request_timeout + timeout,
        )

    async def update_container_resources(
        self, container_id: str, linux: api_pb2.LinuxContainerResources
    ) -> None:
        """Apply new cpu/memory limits to a running container (in-place resize)."""
        await self._call(
            "update_container_resources", "UpdateContainerResources",
            api_pb2.UpdateContainerResourcesRequest(container_id=container_id, linux=linux),
        )

    async def remove_container(self, container_id: str) -> None:
        await self._call(
            "remove_container", "RemoveContainer",
            api_pb2.RemoveContainerRequest(container_id=container_id),
        )

    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None
    ) -> list[api_pb2.Container]:
        response = await self._call(
            "list_containers", "ListContainers",
            api_pb2.ListContainersRequest(filter=filter),
        )
        return list(response.containers)

    async def list_pod_sandbox_and_containers(
        self, sandbox_filter: api_pb2.PodSandboxFilter, container_filter: api_pb2.ContainerFilter
    ) -> tuple[Sequence[api_pb2.PodSandbox], Sequence[api_pb2.Container]]:
        """ListPodSandbox and ListContainers side by side, both in flight at once (the
        PLEG's relist): the runtime answers both together. Each call is recorded and fails
        as alone.

        The answers' repeated fields, not lists: iterated, protobuf makes each item's Python
        object as it is reached and frees it after, where a list holds a thousand at once at
        500 pods and sets off the cyclic collector at every relist."""
        sandboxes, containers = await self._calls(
            ("list_podsandbox", "ListPodSandbox", api_pb2.ListPodSandboxRequest(filter=sandbox_filter)),
            ("list_containers", "ListContainers", api_pb2.ListContainersRequest(filter=container_filter)),
        )
        return sandboxes.items, containers.containers

    async def container_status(
        self, container_id: str, verbose: bool = False
    ) -> api_pb2.ContainerStatusResponse:
        return await self._call(
            "container_status", "ContainerStatus",
            api_pb2.ContainerStatusRequest(container_id=container_id, verbose=verbose),
        )

    async def reopen_container_log(self, container_id: str) -> None:
        """Have the runtime reopen the container's log at its path, creating the file anew
        after the kubelet renamed it (log rotation). Runtimes refuse it for a container
        that is not running."""
        await self._call(
            "reopen_container_log", "ReopenContainerLog",
            api_pb2.ReopenContainerLogRequest(container_id=container_id),
        )

    async def list_container_stats(
        self, filter: api_pb2.ContainerStatsFilter | None = None
    ) -> list[api_pb2.ContainerStats]:
        """Every container's cpu, memory and writable layer in one call. containerd 1.6
        asks each container's shim in turn: about 0.7 ms per container."""
        response = await self._call(
            "list_container_stats", "ListContainerStats",
            api_pb2.ListContainerStatsRequest(filter=filter),
        )
        return list(response.stats)

    async def container_stats(self, container_id: str) -> api_pb2.ContainerStats:
        response = await self._call(
            "container_stats", "ContainerStats",
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
            "list_podsandbox_stats", "ListPodSandboxStats",
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
            return await self._serialized_call(
                "exec_sync", _EXEC_SYNC, _exec_sync_request(container_id, tuple(cmd), seconds), _exec_sync_result,
                timeout=self.request_timeout + seconds if seconds else None,
            )
        except CriError as error:
            if error.code == "DEADLINE_EXCEEDED" and seconds:
                raise CommandTimedOut(endpoint=self.endpoint, cmd=list(cmd), timeout=timeout) from error
            raise

    async def exec(
        self, container_id: str, cmd: Sequence[str], *,
        stdin: bool, stdout: bool, stderr: bool, tty: bool,
    ) -> str:
        """The runtime's streaming URL for running `cmd` in the container (kubectl exec):
        single use, on the runtime's streaming server, which the kubelet proxies to. The
        runtime refuses tty with stderr, and a request with none of stdin/stdout/stderr."""
        return await self._streaming_url(
            "exec", "Exec",
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
            "attach", "Attach",
            api_pb2.AttachRequest(
                container_id=container_id, stdin=stdin, stdout=stdout, stderr=stderr, tty=tty
            ),
        )

    async def port_forward(self, pod_sandbox_id: str, ports: Sequence[int]) -> str:
        """The runtime's streaming URL for forwarding to `ports` in the sandbox's network
        namespace."""
        return await self._streaming_url(
            "port_forward", "PortForward",
            api_pb2.PortForwardRequest(pod_sandbox_id=pod_sandbox_id, port=list(ports)),
        )

    async def _streaming_url(self, operation: str, method: str, request: Any) -> str:
        response = await self._call(operation, method, request)
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
        channel = self._connected()
        request = api_pb2.GetEventsRequest().SerializeToString()
        started = time.perf_counter()
        failed = False
        try:
            async for message in channel.stream(_EVENTS, request):
                yield api_pb2.ContainerEventResponse.FromString(message)
        except RpcError as error:
            failed = True
            raise self._classify(error, operation, timeout=None) from error
        finally:
            if self.metrics is not None:
                self.metrics.record(operation, time.perf_counter() - started, failed=failed)

    # -- ImageService -----------------------------------------------------------------

    async def list_images(self, filter: api_pb2.ImageFilter | None = None) -> list[api_pb2.Image]:
        response = await self._call(
            "list_images", "ListImages", api_pb2.ListImagesRequest(filter=filter)
        )
        return list(response.images)

    async def image_status(
        self, image: str, verbose: bool = False
    ) -> api_pb2.ImageStatusResponse:
        """`.image` is unset (HasField("image") is False) when the runtime lacks the image."""
        return await self._call(
            "image_status", "ImageStatus",
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
            "pull_image", "PullImage",
            api_pb2.PullImageRequest(
                image=api_pb2.ImageSpec(image=image), auth=auth, sandbox_config=sandbox_config
            ),
            timeout=None,
        )
        return response.image_ref

    async def remove_image(self, image: str) -> None:
        await self._call(
            "remove_image", "RemoveImage",
            api_pb2.RemoveImageRequest(image=api_pb2.ImageSpec(image=image)),
        )

    async def image_fs_info(self) -> api_pb2.ImageFsInfoResponse:
        return await self._call(
            "image_fs_info", "ImageFsInfo", api_pb2.ImageFsInfoRequest()
        )
