"""CriClient.list_pod_sandbox_and_containers, the PLEG's relist, against a grpc.aio runtime in
this process: both calls are in flight at once, each is recorded and fails under its own
name as it would alone, and a cancelled trio task cancels both in the runtime."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
import trio
from cri_api.v1 import api_pb2, api_pb2_grpc
from prometheus_client import CollectorRegistry

from pykubelet.ports.cri import CriCallError, CriClient, RuntimeOperationMetrics
from tests.support.fake_runtime import serve_runtime

SANDBOXES = api_pb2.PodSandboxFilter(label_selector={"io.pykubelet.managed": "true"})
CONTAINERS = api_pb2.ContainerFilter(label_selector={"io.pykubelet.managed": "true"})


class ListingRuntime(api_pb2_grpc.RuntimeServiceServicer):
    """Each list call answers only once the other one has arrived (so the two must be in
    flight together), unless told to hang or to fail ListContainers."""

    def __init__(self, *, hang: bool = False, fail_containers: bool = False) -> None:
        self.hang, self.fail_containers = hang, fail_containers
        self.arrived: dict[str, asyncio.Event] = {}
        self.gave_up: dict[str, threading.Event] = {"sandboxes": threading.Event(), "containers": threading.Event()}
        self.filters: dict[str, object] = {}

    async def Version(self, request, context):
        return api_pb2.VersionResponse(version="0.1.0", runtime_name="lists", runtime_version="1",
                                       runtime_api_version="v1")

    async def _both_here(self, mine: str, other: str) -> None:
        for name in (mine, other):
            self.arrived.setdefault(name, asyncio.Event())
        self.arrived[mine].set()
        try:
            await asyncio.wait_for(self.arrived[other].wait(), 10)
            if self.hang:
                await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.gave_up[mine].set()
            raise

    async def ListPodSandbox(self, request, context):
        self.filters["sandboxes"] = request.filter
        await self._both_here("sandboxes", "containers")
        return api_pb2.ListPodSandboxResponse(items=[api_pb2.PodSandbox(id="s1", state=api_pb2.SANDBOX_READY)])

    async def ListContainers(self, request, context):
        self.filters["containers"] = request.filter
        await self._both_here("containers", "sandboxes")
        if self.fail_containers:
            await context.abort(grpc.StatusCode.UNKNOWN, "containers: store unavailable")
        return api_pb2.ListContainersResponse(containers=[api_pb2.Container(id="c1", state=api_pb2.CONTAINER_RUNNING)])


async def test_both_lists_are_in_flight_at_once_and_each_is_recorded() -> None:
    runtime = ListingRuntime()
    registry = CollectorRegistry()
    async with serve_runtime(runtime) as path:
        async with CriClient(path, request_timeout=20, metrics=RuntimeOperationMetrics(registry)) as cri:
            with trio.fail_after(30):
                sandboxes, containers = await cri.list_pod_sandbox_and_containers(SANDBOXES, CONTAINERS)
    assert [s.id for s in sandboxes] == ["s1"] and [c.id for c in containers] == ["c1"]
    assert runtime.filters == {"sandboxes": SANDBOXES, "containers": CONTAINERS}
    for operation in ("list_podsandbox", "list_containers"):
        labels = {"operation_type": operation}
        assert registry.get_sample_value("kubelet_runtime_operations_total", labels) == 1
        assert registry.get_sample_value("kubelet_runtime_operations_duration_seconds_count", labels) == 1
        assert registry.get_sample_value("kubelet_runtime_operations_errors_total", labels) is None


async def test_a_failed_list_fails_under_its_own_name() -> None:
    runtime = ListingRuntime(fail_containers=True)
    registry = CollectorRegistry()
    async with serve_runtime(runtime) as path:
        async with CriClient(path, request_timeout=20, metrics=RuntimeOperationMetrics(registry)) as cri:
            with trio.fail_after(30), pytest.raises(CriCallError) as failed:
                await cri.list_pod_sandbox_and_containers(SANDBOXES, CONTAINERS)
    assert failed.value.operation == "list_containers" and failed.value.code == "UNKNOWN"
    assert "containers: store unavailable" in str(failed.value)
    errors = "kubelet_runtime_operations_errors_total"
    assert registry.get_sample_value(errors, {"operation_type": "list_containers"}) == 1
    assert registry.get_sample_value(errors, {"operation_type": "list_podsandbox"}) is None


async def test_a_cancelled_relist_cancels_both_calls_in_the_runtime() -> None:
    runtime = ListingRuntime(hang=True)
    async with serve_runtime(runtime) as path:
        async with CriClient(path, request_timeout=600) as cri:
            with trio.move_on_after(1) as scope:
                await cri.list_pod_sandbox_and_containers(SANDBOXES, CONTAINERS)
            assert scope.cancelled_caught
            for name in ("sandboxes", "containers"):  # the cancellation, not the 600 s deadline
                assert await trio.to_thread.run_sync(runtime.gave_up[name].wait, 30), name
            assert (await cri.version()).runtime_name == "lists"  # the connection still works
