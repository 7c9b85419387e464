"""The CRI v1 gRPC services of the embedded runtime (RuntimeService, ImageService): thin
adapters from requests to EmbeddedRuntime and from CriFault to a gRPC status.

Images are names only: ImageStatus says every image is present (so imagePullPolicy
IfNotPresent never pulls), PullImage returns at once without any network access.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from pykubelet.messages.version import VERSION

from . import statuses
from .runtime import CriFault, EmbeddedRuntime

log = logging.getLogger("pykubelet.embedded_runtime")

RUNTIME_NAME = "pykubelet-embedded"
RUNTIME_API_VERSION = "v1"
KUBELET_API_VERSION = "0.1.0"  # VersionResponse.version, as containerd answers


def runtime_version() -> str:
    return f"{VERSION} (no isolation, images not pulled)"


def _unary(method: Callable) -> Callable:
    """Turn CriFault into the call's gRPC status; anything else is a bug: log it, and
    answer UNKNOWN naming the call."""

    @functools.wraps(method)
    async def call(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except CriFault as fault:
            log.debug("%s failed: %s: %s", method.__name__, fault.code.name, fault.message)
            await context.abort(fault.code, fault.message)
        except Exception as error:  # noqa: BLE001 - the server must answer, and stay up
            if isinstance(error, grpc.aio.AbortError):
                raise
            log.exception("%s failed unexpectedly", method.__name__)
            await context.abort(grpc.StatusCode.UNKNOWN, f"{method.__name__}: {error!r}")

    return call


def _unimplemented(what: str) -> Callable:
    async def call(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            f"{what} is not supported by the embedded runtime (pykubelet-embedded)",
        )

    return call


class RuntimeService(api_pb2_grpc.RuntimeServiceServicer):
    def __init__(self, runtime: EmbeddedRuntime) -> None:
        self.runtime = runtime

    @_unary
    async def Version(self, request, context):
        return api_pb2.VersionResponse(
            version=KUBELET_API_VERSION,
            runtime_name=RUNTIME_NAME,
            runtime_version=runtime_version(),
            runtime_api_version=RUNTIME_API_VERSION,
        )

    @_unary
    async def Status(self, request, context):
        conditions = [
            api_pb2.RuntimeCondition(type="RuntimeReady", status=True),
            api_pb2.RuntimeCondition(type="NetworkReady", status=True, reason="HostNetworkOnly",
                                     message="every pod has the host's network"),
        ]
        info = {}
        if request.verbose:
            info["config"] = json.dumps({
                "runtime": RUNTIME_NAME, "root": str(self.runtime.runtime_dir),
                "isolation": "none", "images": "not pulled", "network": "host",
            })
        return api_pb2.StatusResponse(status=api_pb2.RuntimeStatus(conditions=conditions), info=info)

    @_unary
    async def RunPodSandbox(self, request, context):
        sandbox_id = self.runtime.run_pod_sandbox(request.config, request.runtime_handler)
        return api_pb2.RunPodSandboxResponse(pod_sandbox_id=sandbox_id)

    @_unary
    async def StopPodSandbox(self, request, context):
        await self.runtime.stop_pod_sandbox(request.pod_sandbox_id)
        return api_pb2.StopPodSandboxResponse()

    @_unary
    async def RemovePodSandbox(self, request, context):
        await self.runtime.remove_pod_sandbox(request.pod_sandbox_id)
        return api_pb2.RemovePodSandboxResponse()

    @_unary
    async def PodSandboxStatus(self, request, context):
        return self.runtime.pod_sandbox_status(request.pod_sandbox_id, request.verbose)

    @_unary
    async def ListPodSandbox(self, request, context):
        flt = request.filter if request.HasField("filter") else None
        return api_pb2.ListPodSandboxResponse(items=self.runtime.list_pod_sandbox(flt))

    @_unary
    async def CreateContainer(self, request, context):
        container_id = self.runtime.create_container(request.pod_sandbox_id, request.config)
        return api_pb2.CreateContainerResponse(container_id=container_id)

    @_unary
    async def StartContainer(self, request, context):
        self.runtime.start_container(request.container_id)
        return api_pb2.StartContainerResponse()

    @_unary
    async def StopContainer(self, request, context):
        await self.runtime.stop_container(request.container_id, request.timeout)
        return api_pb2.StopContainerResponse()

    @_unary
    async def RemoveContainer(self, request, context):
        await self.runtime.remove_container(request.container_id)
        return api_pb2.RemoveContainerResponse()

    @_unary
    async def ListContainers(self, request, context):
        flt = request.filter if request.HasField("filter") else None
        return api_pb2.ListContainersResponse(containers=self.runtime.list_containers(flt))

    @_unary
    async def ContainerStatus(self, request, context):
        return self.runtime.container_status(request.container_id, request.verbose)

    @_unary
    async def ExecSync(self, request, context):
        return await self.runtime.exec_sync(request.container_id, list(request.cmd), request.timeout)

    @_unary
    async def UpdateContainerResources(self, request, context):
        self.runtime.find_container(request.container_id)  # NOT_FOUND for an unknown container
        return api_pb2.UpdateContainerResourcesResponse()  # no cgroups: nothing to update

    @_unary
    async def ReopenContainerLog(self, request, context):
        self.runtime.reopen_container_log(request.container_id)
        return api_pb2.ReopenContainerLogResponse()

    @_unary
    async def UpdateRuntimeConfig(self, request, context):
        return api_pb2.UpdateRuntimeConfigResponse()  # the pod CIDR means nothing here

    @_unary
    async def UpdatePodSandboxResources(self, request, context):
        return api_pb2.UpdatePodSandboxResourcesResponse()

    @_unary
    async def RuntimeConfig(self, request, context):
        return api_pb2.RuntimeConfigResponse(
            linux=api_pb2.LinuxRuntimeConfiguration(cgroup_driver=api_pb2.CGROUPFS)
        )

    async def GetContainerEvents(self, request, context):
        async for event in self.runtime.events():
            yield event

    Exec = _unimplemented("Exec (streaming; use ExecSync)")
    Attach = _unimplemented("Attach")
    PortForward = _unimplemented("PortForward (pods share the host network: connect to 127.0.0.1)")
    ContainerStats = _unimplemented("ContainerStats")
    ListContainerStats = _unimplemented("ListContainerStats")
    PodSandboxStats = _unimplemented("PodSandboxStats")
    ListPodSandboxStats = _unimplemented("ListPodSandboxStats")
    CheckpointContainer = _unimplemented("CheckpointContainer")
    ListMetricDescriptors = _unimplemented("ListMetricDescriptors")
    ListPodSandboxMetrics = _unimplemented("ListPodSandboxMetrics")


class ImageService(api_pb2_grpc.ImageServiceServicer):
    def __init__(self, runtime: EmbeddedRuntime) -> None:
        self.runtime = runtime

    @_unary
    async def ListImages(self, request, context):
        wanted = request.filter.image.image if request.HasField("filter") else ""
        names = [name for name in self.runtime.image_names() if not wanted or name == wanted]
        return api_pb2.ListImagesResponse(images=[statuses.image(n, os.getuid()) for n in names])

    @_unary
    async def ImageStatus(self, request, context):
        name = request.image.image
        if not name:
            raise CriFault(grpc.StatusCode.INVALID_ARGUMENT, "ImageStatus needs an image name")
        return api_pb2.ImageStatusResponse(image=statuses.image(name, os.getuid()))

    @_unary
    async def PullImage(self, request, context):
        name = request.image.image
        if not name:
            raise CriFault(grpc.StatusCode.INVALID_ARGUMENT, "PullImage needs an image name")
        log.info("PullImage %s: nothing pulled (the embedded runtime runs no images)", name)
        return api_pb2.PullImageResponse(image_ref=statuses.image_ref(name))

    @_unary
    async def RemoveImage(self, request, context):
        return api_pb2.RemoveImageResponse()

    @_unary
    async def ImageFsInfo(self, request, context):
        path = str(self.runtime.runtime_dir)
        fs = os.statvfs(path)
        usage = api_pb2.FilesystemUsage(
            timestamp=time.time_ns(),
            fs_id=api_pb2.FilesystemIdentifier(mountpoint=path),
            used_bytes=api_pb2.UInt64Value(value=(fs.f_blocks - fs.f_bfree) * fs.f_frsize),
            inodes_used=api_pb2.UInt64Value(value=fs.f_files - fs.f_ffree),
        )
        return api_pb2.ImageFsInfoResponse(image_filesystems=[usage], container_filesystems=[usage])
