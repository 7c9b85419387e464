"""read_pod_status over a fake CRI client: what it assembles, that it reads side by side,
and that a failed call surfaces as the CriError it is (callers catch CriError)."""

from __future__ import annotations

import pytest
import trio
from cri_api.v1 import api_pb2

from pykubelet.pods.labels import CONTAINER_NAME_LABEL, MANAGED_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL
from pykubelet.ports.cri import CriNotFound, RuntimeUnavailable
from pykubelet.ports.cri.pods import read_created, read_pod_status

UID = "uid-1"
LABELS = {MANAGED_LABEL: "true", POD_UID_LABEL: UID, POD_NAME_LABEL: "web", POD_NAMESPACE_LABEL: "prod"}
CALL_TIME = 1.0  # each fake call takes this long (MockClock time)


class FakeCri:
    def __init__(self, containers: list[tuple[str, int]], *, fail: str = "", gone: str = "") -> None:
        self.containers = containers  # (id, created_at seconds)
        self.fail = fail  # the operation that raises RuntimeUnavailable
        self.gone = gone  # a container id whose status call answers NotFound
        self.calls: list[str] = []

    async def _call(self, operation: str) -> None:
        self.calls.append(operation)
        await trio.sleep(CALL_TIME)
        if operation == self.fail:
            raise RuntimeUnavailable(endpoint="unix:///fake.sock", operation=operation, detail="connection refused")

    async def list_pod_sandbox(self, filter):
        assert filter.label_selector[POD_UID_LABEL] == UID
        await self._call("list_podsandbox")
        return [api_pb2.PodSandbox(
            id="sb1", state=api_pb2.SANDBOX_READY, created_at=5 * 10**9, labels=LABELS,
            metadata=api_pb2.PodSandboxMetadata(name="web", namespace="prod", attempt=1),
        )]

    async def pod_sandbox_status(self, sandbox_id):
        await self._call("podsandbox_status")
        return api_pb2.PodSandboxStatusResponse(status=api_pb2.PodSandboxStatus(
            id=sandbox_id, state=api_pb2.SANDBOX_READY, created_at=5 * 10**9,
            metadata=api_pb2.PodSandboxMetadata(name="web", namespace="prod", attempt=1),
            network=api_pb2.PodSandboxNetworkStatus(ip="10.0.0.7"),
        ))

    async def list_containers(self, filter):
        await self._call("list_containers")
        return [api_pb2.Container(id=cid, labels={**LABELS, CONTAINER_NAME_LABEL: cid}) for cid, _ in self.containers]

    async def container_status(self, container_id):
        await self._call("container_status")
        if container_id == self.gone:
            raise CriNotFound(endpoint="unix:///fake.sock", operation="container_status", code="NOT_FOUND", detail="gone")
        created = dict(self.containers)[container_id]
        return api_pb2.ContainerStatusResponse(status=api_pb2.ContainerStatus(
            id=container_id, state=api_pb2.CONTAINER_RUNNING, created_at=created * 10**9,
            started_at=(created + 1) * 10**9, labels={CONTAINER_NAME_LABEL: container_id},
        ))


async def test_assembles_the_pod_newest_container_first(autojump_clock):
    status = await read_pod_status(FakeCri([("a", 10), ("b", 30), ("c", 20)]), UID)
    assert (status.name, status.namespace) == ("web", "prod")
    assert [(s.id, s.state, s.ip, s.attempt) for s in status.sandboxes] == [("sb1", "ready", "10.0.0.7", 1)]
    assert [c.id for c in status.containers] == ["b", "c", "a"]
    assert all(c.state == "running" and c.started_at == c.created_at + 1 for c in status.containers)


async def test_reads_side_by_side(autojump_clock):
    started = trio.current_time()
    await read_pod_status(FakeCri([("a", 10), ("b", 30), ("c", 20)]), UID)
    # list sandboxes || list containers, then their status calls together: 2 calls deep,
    # where one after the other would be 2 + 1 + 3 = 6.
    assert trio.current_time() - started == 2 * CALL_TIME


async def test_a_container_removed_meanwhile_is_left_out(autojump_clock):
    status = await read_pod_status(FakeCri([("a", 10), ("b", 30)], gone="a"), UID)
    assert [c.id for c in status.containers] == ["b"]


@pytest.mark.parametrize("operation", ["list_podsandbox", "list_containers", "container_status", "podsandbox_status"])
async def test_a_failed_call_raises_its_cri_error_not_a_group(autojump_clock, operation):
    with pytest.raises(RuntimeUnavailable) as raised:
        await read_pod_status(FakeCri([("a", 10), ("b", 30)], fail=operation), UID)
    assert raised.value.operation == operation


async def test_a_pod_just_created_is_read_by_its_new_ids_alone(autojump_clock):
    cri = FakeCri([("a", 10), ("b", 30)])
    started = trio.current_time()
    created = await read_created(cri, UID, "web", "prod", ["sb1"], ["a", "b"])
    assert trio.current_time() - started == CALL_TIME  # one call deep
    assert sorted(cri.calls) == ["container_status", "container_status", "podsandbox_status"]  # no lists
    assert created == await read_pod_status(FakeCri([("a", 10), ("b", 30)]), UID, "web", "prod")


async def test_a_new_object_removed_meanwhile_is_left_out(autojump_clock):
    created = await read_created(FakeCri([("a", 10), ("b", 30)], gone="b"), UID, "web", "prod", ["sb1"], ["a", "b"])
    assert [c.id for c in created.containers] == ["a"] and [s.id for s in created.sandboxes] == ["sb1"]
