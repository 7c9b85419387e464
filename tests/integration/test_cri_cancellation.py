"""The CRI port against a runtime that never answers (a grpc.aio server in this process, on
the grpc loop): a cancelled trio task cancels its RPC in the runtime at once, a hung call
times out with RuntimeTimeout, and a call cut off by the client's close reaches an actor as
RuntimeUnavailable, so that its supervisor restarts it (asyncio's CancelledError never
gets out of the port)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import pytest
import trio
from cri_api.v1 import api_pb2, api_pb2_grpc
from prometheus_client import CollectorRegistry

from pykubelet.ports.cri import CriClient, RuntimeOperationMetrics, RuntimeTimeout
from pykubelet.supervisor import ChildSpec, Supervisor
from tests.support.fake_runtime import serve_runtime


class HungRuntime(api_pb2_grpc.RuntimeServiceServicer):
    """Answers Version; ListPodSandbox never answers, and notes when its caller gives up."""

    def __init__(self) -> None:
        self.listing = threading.Event()
        self.gave_up = threading.Event()
        self.gave_up_at = 0.0

    async def Version(self, request, context):
        return api_pb2.VersionResponse(version="0.1.0", runtime_name="hung", runtime_version="1",
                                       runtime_api_version="v1")

    async def ListPodSandbox(self, request, context):
        self.listing.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:  # the client cancelled the RPC, or its deadline passed
            self.gave_up_at = time.monotonic()
            self.gave_up.set()
            raise


@pytest.fixture
async def hung() -> AsyncIterator[tuple[HungRuntime, str]]:
    runtime = HungRuntime()
    async with serve_runtime(runtime) as path:
        yield runtime, path


async def seen(event: threading.Event, within: float = 30.0) -> bool:
    return await trio.to_thread.run_sync(event.wait, within)


async def test_a_cancelled_trio_task_cancels_its_rpc_in_the_runtime_at_once(hung) -> None:
    runtime, path = hung
    registry = CollectorRegistry()
    async with CriClient(path, request_timeout=60, metrics=RuntimeOperationMetrics(registry)) as cri:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cri.list_pod_sandbox)
                assert await seen(runtime.listing)
                cancelled_at = time.monotonic()
                scope.cancel()
        assert scope.cancelled_caught
        assert await seen(runtime.gave_up)
        assert runtime.gave_up_at - cancelled_at < 30  # the cancellation, not the 60 s deadline
        # Still one connection that works: the next call answers.
        assert (await cri.version()).runtime_name == "hung"
    operation = {"operation_type": "list_podsandbox"}
    assert registry.get_sample_value("kubelet_runtime_operations_total", operation) == 1


async def test_a_hung_runtime_times_out_with_runtime_timeout(hung) -> None:
    runtime, path = hung
    registry = CollectorRegistry()
    async with CriClient(path, request_timeout=0.5, metrics=RuntimeOperationMetrics(registry)) as cri:
        started = time.monotonic()
        with pytest.raises(RuntimeTimeout) as timeout:
            await cri.list_pod_sandbox()
        assert 0.4 < time.monotonic() - started < 30  # the 0.5 s timeout, not grpc's default
    assert str(timeout.value) == (
        f"CRI list_podsandbox: the runtime at unix://{path} did not answer within 0.5s "
        "(--runtime-request-timeout)"
    )
    assert await seen(runtime.gave_up)  # the deadline reached the runtime too
    operation = {"operation_type": "list_podsandbox"}
    assert registry.get_sample_value("kubelet_runtime_operations_errors_total", operation) == 1


async def test_a_call_cut_off_by_the_close_crashes_its_actor_into_a_restart(hung) -> None:
    # The runtime link closes its client when its session ends, while other actors may be
    # in a call: grpc.aio cancels those calls on the loop. The actor must see a CriError it
    # may let crash (the supervisor restarts it), not asyncio's CancelledError, which the
    # supervisor does not catch.
    runtime, path = hung
    cri = CriClient(path, request_timeout=60)
    await cri.connect()
    incarnations: list[int] = []

    async def lister(ctx) -> None:
        incarnations.append(len(incarnations) + 1)
        if len(incarnations) == 1:
            await cri.list_pod_sandbox()
        await trio.sleep_forever()

    tree = Supervisor("root", [ChildSpec("lister", lister)])
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(tree.run)
            assert await seen(runtime.listing)
            await cri.close()
            while len(incarnations) < 2:
                await trio.sleep(0.01)
            child = tree.snapshot().children[0]
            assert child.restarts == 1 and child.state == "running"
            assert child.last_error.type == "RuntimeUnavailable"
            assert "the connection was closed during the call" in child.last_error.message
            nursery.cancel_scope.cancel()
