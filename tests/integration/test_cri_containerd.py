"""CriClient against a real, private containerd: handshake, status, a pod's whole life,
images, the errors an operator meets (no socket, a socket that is not CRI), metrics."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator

import grpc
import pytest
import trio
from tests.support import grpc_loop
from cri_api.v1 import api_pb2

from pykubelet.ports.cri import (
    CommandTimedOut,
    CriClient,
    CriNotFound,
    NotCriRuntime,
    RuntimeUnavailable,
)
from tests.support.containerd import BUSYBOX_IMAGE, PAUSE_IMAGE

# A container that stops at once on TERM (sleep as PID 1 would ignore it).
TRAPPING_LOOP = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]


def host_network_sandbox(name: str) -> api_pb2.PodSandboxConfig:
    # No hostname: a host-network sandbox has no UTS namespace of its own to set it in.
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(
            name=name, namespace="default", uid=str(uuid.uuid4()), attempt=0
        ),
        labels={"io.kubernetes.pod.name": name},
        linux=api_pb2.LinuxPodSandboxConfig(
            security_context=api_pb2.LinuxSandboxSecurityContext(
                namespace_options=api_pb2.NamespaceOption(network=api_pb2.NODE)
            )
        ),
    )


def busybox_container(name: str, command: list[str]) -> api_pb2.ContainerConfig:
    return api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=name, attempt=0),
        image=api_pb2.ImageSpec(image=BUSYBOX_IMAGE),
        command=command,
        labels={"io.kubernetes.container.name": name},
    )


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A temp dir with a short path: unix socket paths are limited to 108 bytes."""
    path = tempfile.mkdtemp(prefix="pykt-cri-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


# -- against containerd ------------------------------------------------------------------


@pytest.mark.containerd
async def test_version_handshake_names_containerd_and_cri_v1(cri: CriClient) -> None:
    assert cri.runtime_version is not None
    assert cri.runtime_version.runtime_name == "containerd"
    assert cri.runtime_version.runtime_api_version == "v1"
    assert await cri.version() == cri.runtime_version


@pytest.mark.containerd
async def test_status_reports_runtime_ready(cri: CriClient) -> None:
    status = await cri.status()
    ready = status.condition("RuntimeReady")
    assert ready is not None and ready.status is True
    assert status.runtime_ready
    # No CNI config in the private instance: the network is not ready, host network works.
    assert status.condition("NetworkReady") is not None
    assert status.condition("NoSuchCondition") is None


@pytest.mark.containerd
async def test_host_network_pod_runs_a_busybox_container_through_its_whole_life(
    cri: CriClient,
) -> None:
    sandbox_config = host_network_sandbox("life")
    sandbox_id = await cri.run_pod_sandbox(sandbox_config)
    sandbox = await cri.pod_sandbox_status(sandbox_id)
    assert sandbox.status.state == api_pb2.SANDBOX_READY
    assert sandbox.status.metadata.uid == sandbox_config.metadata.uid

    container_id = await cri.create_container(
        sandbox_id, busybox_container("main", TRAPPING_LOOP), sandbox_config
    )
    await cri.start_container(container_id)

    listed = await cri.list_containers(api_pb2.ContainerFilter(pod_sandbox_id=sandbox_id))
    assert [(c.id, c.metadata.name, c.state) for c in listed] == [
        (container_id, "main", api_pb2.CONTAINER_RUNNING)
    ]
    status = (await cri.container_status(container_id)).status
    assert status.state == api_pb2.CONTAINER_RUNNING
    assert status.image.image == BUSYBOX_IMAGE
    assert status.labels["io.kubernetes.container.name"] == "main"

    result = await cri.exec_sync(
        container_id, ["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=5
    )
    assert (result.stdout, result.stderr, result.exit_code) == (b"out\n", b"err\n", 3)

    started = time.monotonic()
    await cri.stop_container(container_id, timeout=10)
    assert time.monotonic() - started < 5, "a container that traps TERM stops at once"
    status = (await cri.container_status(container_id)).status
    assert status.state == api_pb2.CONTAINER_EXITED
    assert status.exit_code == 0

    await cri.remove_container(container_id)
    with pytest.raises(CriNotFound) as not_found:
        await cri.container_status(container_id)
    assert not_found.value.operation == "container_status"

    await cri.stop_pod_sandbox(sandbox_id)
    await cri.remove_pod_sandbox(sandbox_id)
    assert sandbox_id not in [s.id for s in await cri.list_pod_sandbox()]


async def start_trapping_loop(cri: CriClient, pod: str) -> str:
    """A running busybox container (in a host-network pod) that stops fast on SIGTERM."""
    sandbox_config = host_network_sandbox(pod)
    sandbox_id = await cri.run_pod_sandbox(sandbox_config)
    container_id = await cri.create_container(
        sandbox_id, busybox_container("main", TRAPPING_LOOP), sandbox_config
    )
    await cri.start_container(container_id)
    return container_id


@pytest.mark.containerd
async def test_exec_sync_past_its_timeout_raises_command_timed_out(cri: CriClient) -> None:
    container_id = await start_trapping_loop(cri, "exec-timeout")

    started = time.monotonic()
    with pytest.raises(CommandTimedOut) as timed_out:
        await cri.exec_sync(container_id, ["sleep", "30"], timeout=1)
    assert time.monotonic() - started < 5
    assert "'sleep 30' timed out after 1s" in str(timed_out.value)


@pytest.mark.containerd
async def test_cancelling_the_caller_cancels_the_exec_in_the_runtime(cri: CriClient) -> None:
    container_id = await start_trapping_loop(cri, "exec-cancel")

    with trio.move_on_after(0.3) as scope:
        await cri.exec_sync(container_id, ["sleep", "30"], timeout=60)
    assert scope.cancelled_caught
    # The runtime ends the exec once it sees the call cancelled: soon, not at once on a
    # busy node. Without the cancel it would run its 30 s.
    with trio.move_on_after(10):
        while b"sleep 30" in (await cri.exec_sync(container_id, ["ps", "-o", "args"], timeout=5)).stdout:
            await trio.sleep(0.1)
    processes = await cri.exec_sync(container_id, ["ps", "-o", "args"], timeout=5)
    assert b"sleep 30" not in processes.stdout
    assert cri.metrics is not None
    assert cri.metrics.registry.get_sample_value(
        "kubelet_runtime_operations_errors_total", {"operation_type": "exec_sync"}
    ) == 1


@pytest.mark.containerd
async def test_images_lists_the_imported_busybox_and_pause(cri: CriClient) -> None:
    tags = {tag for image in await cri.list_images() for tag in image.repo_tags}
    assert {BUSYBOX_IMAGE, PAUSE_IMAGE} <= tags

    present = await cri.image_status(BUSYBOX_IMAGE)
    assert present.HasField("image") and BUSYBOX_IMAGE in present.image.repo_tags
    absent = await cri.image_status("localhost/pykubelet/not-there:1")
    assert not absent.HasField("image")

    filesystems = await cri.image_fs_info()
    assert filesystems.image_filesystems


@pytest.mark.containerd
async def test_each_call_counts_under_the_go_kubelet_operation_type(cri: CriClient) -> None:
    assert cri.metrics is not None
    registry = cri.metrics.registry

    def sample(name: str, operation: str) -> float:
        return registry.get_sample_value(name, {"operation_type": operation}) or 0.0

    assert sample("kubelet_runtime_operations_total", "version") == 1  # connect's handshake
    await cri.version()
    await cri.list_pod_sandbox()
    await cri.list_images()
    with pytest.raises(CriNotFound):
        await cri.container_status("0" * 64)

    assert sample("kubelet_runtime_operations_total", "version") == 2
    assert sample("kubelet_runtime_operations_total", "list_podsandbox") == 1
    assert sample("kubelet_runtime_operations_total", "list_images") == 1
    assert sample("kubelet_runtime_operations_total", "container_status") == 1
    assert sample("kubelet_runtime_operations_errors_total", "container_status") == 1
    assert sample("kubelet_runtime_operations_errors_total", "version") == 0
    assert sample("kubelet_runtime_operations_duration_seconds_count", "version") == 2


# -- the runtime going away and coming back ----------------------------------------------


@pytest.mark.containerd
async def test_killed_runtime_is_unavailable_then_answers_again_after_restart(
    fresh_containerd
) -> None:
    async with CriClient(fresh_containerd.endpoint, request_timeout=5) as client:
        sandbox_id = await client.run_pod_sandbox(host_network_sandbox("survivor"))
        fresh_containerd.kill()
        started = time.monotonic()
        with pytest.raises(RuntimeUnavailable) as unavailable:
            await client.version()
        assert time.monotonic() - started < 1
        assert fresh_containerd.socket in str(unavailable.value)

        fresh_containerd.restart()
        # The channel reconnects by itself (backoff 100 ms growing to 3 s).
        with trio.fail_after(5):
            while True:
                try:
                    version = await client.version()
                    break
                except RuntimeUnavailable:
                    await trio.sleep(0.05)
        assert version.runtime_name == "containerd"
        # The sandbox lived on in its shim while containerd was away.
        sandbox = await client.pod_sandbox_status(sandbox_id)
        assert sandbox.status.state == api_pb2.SANDBOX_READY


@pytest.mark.containerd
async def test_a_new_client_connects_at_once_once_the_runtime_is_back(fresh_containerd) -> None:
    """The runtime link opens a new client for each attempt during an outage. The one after
    the runtime is back must connect at once: grpc-core shares one connection per address
    among channels unless told not to, and the new channel then inherited the reconnect
    back-off the earlier ones built up (the link reconnected up to 6 s after containerd was
    back; found restarting containerd under load, tests/chaos/test_containerd_restart.py)."""
    fresh_containerd.kill()
    for _ in range(10):  # what the runtime link does while the runtime is away
        with pytest.raises(RuntimeUnavailable):
            async with CriClient(fresh_containerd.endpoint, request_timeout=5):
                pass
        await trio.sleep(0.3)
    fresh_containerd.restart()
    async with CriClient(fresh_containerd.endpoint, request_timeout=5) as client:
        assert client.runtime_version.runtime_name == "containerd"


# -- endpoints that are not a CRI runtime ------------------------------------------------


async def test_missing_socket_raises_runtime_unavailable_naming_the_path(
    short_dir: str
) -> None:
    path = os.path.join(short_dir, "nothing-here.sock")
    client = CriClient(path, request_timeout=5)
    started = time.monotonic()
    with pytest.raises(RuntimeUnavailable) as unavailable:
        await client.connect()
    assert time.monotonic() - started < 1
    message = str(unavailable.value)
    assert f"unix://{path}" in message
    assert "No such file or directory" in message
    assert "--container-runtime-endpoint" in message


async def test_plain_grpc_server_is_not_a_cri_runtime(short_dir: str) -> None:
    path = os.path.join(short_dir, "plain-grpc.sock")

    async def start_server() -> grpc.aio.Server:
        server = grpc.aio.server()  # no services at all: every method is UNIMPLEMENTED
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        return server

    server = await grpc_loop.run(start_server)
    try:
        with pytest.raises(NotCriRuntime) as not_cri:
            await CriClient(path, request_timeout=5).connect()
        assert f"unix://{path} answers but is not a CRI v1 runtime" in str(not_cri.value)
    finally:
        await grpc_loop.run(server.stop, None)


async def test_http_server_on_the_socket_is_not_a_cri_runtime(
    short_dir: str
) -> None:
    path = os.path.join(short_dir, "http.sock")
    listener = trio.socket.socket(trio.socket.AF_UNIX)
    await listener.bind(path)
    listener.listen()

    async def answer_http(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.receive_some(65536)
            await stream.send_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, answer_http, [trio.SocketListener(listener)])
        with pytest.raises(NotCriRuntime) as not_cri:
            await CriClient(path, request_timeout=5).connect()
        assert "HTTP/1.x" in str(not_cri.value)
        assert f"unix://{path}" in str(not_cri.value)
        nursery.cancel_scope.cancel()


async def test_silent_socket_fails_within_the_request_timeout(
    short_dir: str
) -> None:
    path = os.path.join(short_dir, "silent.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()  # accepts connections (kernel backlog), never says a word
    try:
        started = time.monotonic()
        with pytest.raises(RuntimeUnavailable) as unavailable:
            await CriClient(path, request_timeout=0.5).connect()
        assert time.monotonic() - started < 2
        assert "no gRPC server answered within 0.5s" in str(unavailable.value)
    finally:
        listener.close()
