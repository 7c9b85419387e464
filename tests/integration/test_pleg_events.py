"""The runtime's container events (CRI GetContainerEvents) through CriClient and the PLEG,
against the embedded runtime, which streams them, and containerd, which (1.6) does not:
there the PLEG falls back to relisting every second."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from cri_api.v1 import api_pb2, api_pb2_grpc
from prometheus_client import CollectorRegistry

from pykubelet.actors.health import HealthBoard
from pykubelet.actors.pleg import PlegMetrics, PlegSettings, RuntimePods, pleg_actor
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.messages.pod_updates import PlegEvent
from pykubelet.pods.labels import CONTAINER_NAME_LABEL, MANAGED_LABEL, POD_NAME_LABEL, POD_UID_LABEL
from tests.support import grpc_loop
from pykubelet.ports.cri import CriClient, EventsUnsupported, RuntimeUnavailable
from pykubelet.supervisor import ChildSpec
from tests.support.actors import Inbox, running
from tests.support.containerd import BUSYBOX_IMAGE
from tests.support.fake_runtime import serve_runtime

TRAPPING_LOOP = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]


class Pod:
    """A host-network sandbox with one container, labelled as pykubelet labels them (or not)."""

    def __init__(self, cri: CriClient, name: str, *, image: str = "busybox:1.36", managed: bool = True) -> None:
        self.cri = cri
        self.uid = str(uuid.uuid4())
        mark = {MANAGED_LABEL: "true"} if managed else {}
        self.sandbox_config = api_pb2.PodSandboxConfig(
            metadata=api_pb2.PodSandboxMetadata(name=name, namespace="default", uid=self.uid, attempt=0),
            labels={POD_NAME_LABEL: name, POD_UID_LABEL: self.uid, **mark},
            linux=api_pb2.LinuxPodSandboxConfig(
                security_context=api_pb2.LinuxSandboxSecurityContext(
                    namespace_options=api_pb2.NamespaceOption(network=api_pb2.NODE)
                )
            ),
        )
        self.container_config = api_pb2.ContainerConfig(
            metadata=api_pb2.ContainerMetadata(name="main", attempt=0),
            image=api_pb2.ImageSpec(image=image),
            command=TRAPPING_LOOP,
            labels={POD_NAME_LABEL: name, POD_UID_LABEL: self.uid, CONTAINER_NAME_LABEL: "main", **mark},
        )
        self.sandbox_id = self.container_id = ""

    async def run(self) -> None:
        self.sandbox_id = await self.cri.run_pod_sandbox(self.sandbox_config)
        self.container_id = await self.cri.create_container(
            self.sandbox_id, self.container_config, self.sandbox_config
        )
        await self.cri.start_container(self.container_id)

    async def remove(self) -> None:
        await self.cri.stop_container(self.container_id, timeout=10)
        await self.cri.remove_container(self.container_id)
        await self.cri.stop_pod_sandbox(self.sandbox_id)
        await self.cri.remove_pod_sandbox(self.sandbox_id)


@asynccontextmanager
async def pleg(cri: CriClient, inbox: Inbox, settings: PlegSettings = PlegSettings()):
    handle = RuntimeHandle(cri.endpoint)
    handle.attach(cri, cri.runtime_version)
    actor = pleg_actor(
        PlegSettings(**{**settings.__dict__, "send_to": "root/inbox"}), runtime=handle,
        health=HealthBoard(), metrics=PlegMetrics(CollectorRegistry()), cache=RuntimePods(),
    )
    async with running(inbox.spec("inbox"), ChildSpec("pleg", actor)):
        yield


async def wait_for(inbox: Inbox, pod_uid: str, kind: str, container_id: str, within: float) -> float:
    """The trio time the PlegEvent arrived."""
    with trio.fail_after(within):
        while True:
            for message, at in zip(inbox.messages, inbox.times):
                if message == PlegEvent(pod_uid=pod_uid, type=kind, container_id=container_id):
                    return at
            await trio.sleep(0.005)


# -- the embedded runtime: events --------------------------------------------------------


async def test_embedded_runtime_streams_each_transition_with_the_containers_labels(
    embedded_cri: CriClient,
) -> None:
    seen: list[api_pb2.ContainerEventResponse] = []
    pod = Pod(embedded_cri, "streamed")

    async def follow(task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with contextlib.aclosing(embedded_cri.container_events()) as events:
            task_status.started()
            async for event in events:
                seen.append(event)

    async with trio.open_nursery() as nursery:
        await nursery.start(follow)
        await trio.sleep(0.1)  # the subscription reaches the runtime
        await pod.run()
        await pod.remove()
        with trio.fail_after(5):
            while not any(e.container_id == pod.sandbox_id and e.container_event_type == api_pb2.CONTAINER_DELETED_EVENT
                          for e in seen):
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()

    of_container = [e.container_event_type for e in seen if e.container_id == pod.container_id]
    assert of_container == [
        api_pb2.CONTAINER_CREATED_EVENT, api_pb2.CONTAINER_STARTED_EVENT,
        api_pb2.CONTAINER_STOPPED_EVENT, api_pb2.CONTAINER_DELETED_EVENT,
    ]
    started = next(e for e in seen if e.container_event_type == api_pb2.CONTAINER_STARTED_EVENT)
    status = next(s for s in started.containers_statuses if s.id == pod.container_id)
    assert status.labels[MANAGED_LABEL] == "true" and status.labels[POD_UID_LABEL] == pod.uid
    assert started.pod_sandbox_status.id == pod.sandbox_id
    # The stream was cancelled with its reader, and counted as one operation that did not fail.
    registry = embedded_cri.metrics.registry
    counts = [
        registry.get_sample_value(name, {"operation_type": "get_container_events"}) or 0
        for name in ("kubelet_runtime_operations_total", "kubelet_runtime_operations_errors_total")
    ]
    assert counts == [1, 0]
    assert (await embedded_cri.version()).runtime_name == "pykubelet-embedded"  # the channel lives on


async def test_pleg_reports_start_and_exit_from_events_not_the_relist(embedded_cri: CriClient) -> None:
    inbox = Inbox()
    # A relist once a minute: whatever arrives within the test came from the event stream.
    async with pleg(embedded_cri, inbox, PlegSettings(relist_period=60, evented_relist_period=60)):
        await trio.sleep(0.2)  # the first relist and the subscription
        pod = Pod(embedded_cri, "evented")
        await pod.run()
        started = trio.current_time()
        arrived = await wait_for(inbox, pod.uid, "ContainerStarted", pod.container_id, within=2)
        assert arrived - started < 0.5
        await embedded_cri.stop_container(pod.container_id, timeout=10)
        stopped = trio.current_time()
        arrived = await wait_for(inbox, pod.uid, "ContainerDied", pod.container_id, within=2)
        assert arrived - stopped < 0.5
        await embedded_cri.remove_container(pod.container_id)
        await wait_for(inbox, pod.uid, "ContainerRemoved", pod.container_id, within=2)
        await embedded_cri.stop_pod_sandbox(pod.sandbox_id)
        await wait_for(inbox, pod.uid, "SandboxChanged", pod.sandbox_id, within=2)
    about_pod = [(m.type, m.container_id) for m in inbox.messages if m.pod_uid == pod.uid]
    assert about_pod == [
        ("ContainerChanged", pod.container_id),  # CREATED
        ("ContainerStarted", pod.container_id),
        ("ContainerDied", pod.container_id),
        ("ContainerRemoved", pod.container_id),
        ("SandboxChanged", pod.sandbox_id),
    ]


async def test_pleg_ignores_events_of_containers_it_did_not_create(embedded_cri: CriClient) -> None:
    inbox = Inbox()
    async with pleg(embedded_cri, inbox, PlegSettings(relist_period=60, evented_relist_period=60)):
        await trio.sleep(0.2)
        foreign = Pod(embedded_cri, "foreign", managed=False)
        await foreign.run()
        await foreign.remove()
        ours = Pod(embedded_cri, "ours")  # its events come after the foreign pod's
        await ours.run()
        await wait_for(inbox, ours.uid, "ContainerStarted", ours.container_id, within=2)
    assert {m.pod_uid for m in inbox.messages} == {ours.uid}


async def test_relist_after_events_reports_nothing_twice(embedded_cri: CriClient) -> None:
    inbox = Inbox()
    async with pleg(embedded_cri, inbox, PlegSettings(relist_period=0.05, evented_relist_period=0.05)):
        await trio.sleep(0.2)
        pod = Pod(embedded_cri, "twice")
        await pod.run()
        await embedded_cri.stop_container(pod.container_id, timeout=10)
        await wait_for(inbox, pod.uid, "ContainerDied", pod.container_id, within=2)
        await trio.sleep(0.5)  # ten relists
    about_pod = [m.type for m in inbox.messages if m.pod_uid == pod.uid]
    assert about_pod == ["ContainerChanged", "ContainerStarted", "ContainerDied"]


class EndlessEvents(api_pb2_grpc.RuntimeServiceServicer):
    """A runtime whose event stream sends one event and then nothing, and notes its end."""

    def __init__(self) -> None:
        self.stream_ended = asyncio.Event()
        self.end: str = ""

    async def Version(self, request, context):
        return api_pb2.VersionResponse(version="0.1.0", runtime_name="endless", runtime_version="1",
                                       runtime_api_version="v1")

    async def ListContainers(self, request, context):
        await asyncio.sleep(3600)  # a call still in flight when the client closes

    async def GetContainerEvents(self, request, context):
        try:
            yield api_pb2.ContainerEventResponse(container_id="c1")
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.end = "cancelled by the client"
            raise
        finally:
            self.stream_ended.set()


@pytest.fixture
async def endless() -> AsyncIterator[tuple[EndlessEvents, str]]:
    """An EndlessEvents runtime on a socket: (the servicer, the socket path)."""
    runtime = EndlessEvents()
    async with serve_runtime(runtime) as path:
        yield runtime, path


async def test_cancelling_the_reader_cancels_the_stream_in_the_runtime(endless) -> None:
    runtime, path = endless
    async with CriClient(path, request_timeout=5) as cri:
        with trio.move_on_after(0.3) as reading:  # the stream has no deadline of its own
            async with contextlib.aclosing(cri.container_events()) as events:
                async for event in events:
                    assert event.container_id == "c1"
        assert reading.cancelled_caught
        with trio.fail_after(2):
            await grpc_loop.run(runtime.stream_ended.wait)
        assert runtime.end == "cancelled by the client"


async def test_closing_the_client_fails_the_stream_and_calls_in_flight_as_unavailable(endless) -> None:
    # The runtime link closes its client when its session ends, while the PLEG reads the
    # stream and may be in a call: both must see a CriError, not asyncio's CancelledError
    # (a BaseException no actor expects, which took the PLEG down uncaught).
    _, path = endless
    cri = CriClient(path, request_timeout=30)
    await cri.connect()
    failures: dict[str, BaseException] = {}

    async def read_stream() -> None:
        try:
            async with contextlib.aclosing(cri.container_events()) as events:
                async for _ in events:
                    pass
        except BaseException as exc:
            failures["stream"] = exc

    async def list_containers() -> None:
        try:
            await cri.list_containers()
        except BaseException as exc:
            failures["call"] = exc

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_stream)
            nursery.start_soon(list_containers)
            await trio.sleep(0.3)
            await cri.close()
    assert {name: type(exc) for name, exc in failures.items()} == {
        "stream": RuntimeUnavailable, "call": RuntimeUnavailable,
    }
    assert "the connection was closed" in str(failures["stream"])
    with pytest.raises(RuntimeUnavailable, match="the connection was closed"):
        await cri.version()  # and a call after the close fails the same way


# -- containerd 1.6: no events, the relist every second ----------------------------------


def offers_events(cri: CriClient) -> bool:
    """containerd streams container events from 1.7 on."""
    version = tuple(int(part) for part in re.findall(r"\d+", cri.runtime_version.runtime_version)[:2])
    return version >= (1, 7)


@pytest.mark.containerd
async def test_containerd_answers_whether_it_offers_container_events(cri: CriClient) -> None:
    if offers_events(cri):
        with trio.move_on_after(0.5):
            async with contextlib.aclosing(cri.container_events()) as events:
                async for _ in events:
                    break
        return
    with pytest.raises(EventsUnsupported) as unsupported:
        async with contextlib.aclosing(cri.container_events()) as events:
            async for _ in events:
                pass
    assert unsupported.value.code == "UNIMPLEMENTED"
    assert "GetContainerEvents" in str(unsupported.value) and cri.endpoint in str(unsupported.value)


@pytest.mark.containerd
async def test_pleg_on_containerd_falls_back_to_relisting_every_second(
    cri: CriClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "pykubelet.pleg")
    inbox = Inbox()
    async with pleg(cri, inbox):
        await trio.sleep(0.2)
        pod = Pod(cri, "relisted", image=BUSYBOX_IMAGE)
        await pod.run()
        await wait_for(inbox, pod.uid, "ContainerStarted", pod.container_id, within=3)
        await cri.stop_container(pod.container_id, timeout=10)
        stopped = trio.current_time()
        arrived = await wait_for(inbox, pod.uid, "ContainerDied", pod.container_id, within=3)
    logged = [r.getMessage() for r in caplog.records if "container events" in r.getMessage()]
    if offers_events(cri):
        assert arrived - stopped < 0.5 and logged == []
    else:
        assert logged == ["runtime offers no container events; relisting every 1s"]
        assert arrived - stopped <= 1.5  # the next relist, a second at most, saw it
