"""Garbage collection against a private containerd: one container round removes the right
dead containers, sandboxes and logs and nothing else; one image round removes an unused
image and keeps the ones in use."""

from __future__ import annotations

import uuid
from pathlib import Path

import msgspec
import pytest
import trio
from cri_api.v1 import api_pb2
from prometheus_client import CollectorRegistry

from pykubelet.actors.gc import GarbageCollector, GcMetrics, GcSettings
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.messages.pod import Pod
from pykubelet.pods.labels import MANAGED_LABEL
from pykubelet.pods.runtime_config import container_config, pod_log_directory, sandbox_config
from pykubelet.ports.cri import CriClient, RuntimeOperationMetrics
from tests.support.containerd import BUSYBOX_IMAGE, PAUSE_IMAGE
from tests.support.images import _Layer, _write_oci_archive
from tests.support.pods import TRAPPING_LOOP

EXITS_AT_ONCE = ["sh", "-c", "echo bye"]
UNUSED_IMAGE = "localhost/pykubelet/gc-unused:1"
BUSYBOX_ALIAS = "localhost/pykubelet/busybox:gc-alias"


def make_pod(name: str) -> Pod:
    return msgspec.convert(
        {
            "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
            "spec": {
                "hostNetwork": True,
                "terminationGracePeriodSeconds": 2,
                "containers": [
                    {"name": "app", "image": BUSYBOX_IMAGE, "command": EXITS_AT_ONCE},
                    {"name": "side", "image": BUSYBOX_IMAGE, "command": TRAPPING_LOOP},
                ],
            },
        },
        Pod,
    )


class Runtime:
    """Sandboxes and containers made as the pod workers make them (or, with
    managed=False, as something else on the node would: without io.pykubelet.managed)."""

    def __init__(self, cri: CriClient, logs: Path) -> None:
        self.cri = cri
        self.logs = logs

    async def sandbox(
        self, pod: Pod, *, attempt: int = 0, managed: bool = True
    ) -> tuple[str, api_pb2.PodSandboxConfig]:
        config = sandbox_config(pod, attempt=attempt, pod_logs_dir=str(self.logs))
        if not managed:
            del config.labels[MANAGED_LABEL]
        return await self.cri.run_pod_sandbox(config), config

    async def container(
        self, pod: Pod, sandbox: tuple[str, api_pb2.PodSandboxConfig], name: str, *,
        restart_count: int = 0, managed: bool = True,
    ) -> str:
        spec = next(c for c in pod.spec.containers if c.name == name)
        config = container_config(pod, spec, image_ref=BUSYBOX_IMAGE, restart_count=restart_count, volume_paths={})
        if not managed:
            del config.labels[MANAGED_LABEL]
        cid = await self.cri.create_container(sandbox[0], config, sandbox[1])
        await self.cri.start_container(cid)
        if spec.command == EXITS_AT_ONCE:
            await self.wait_exited(cid)
        return cid

    async def wait_exited(self, cid: str) -> None:
        with trio.fail_after(10):
            while (await self.cri.container_status(cid)).status.state != api_pb2.CONTAINER_EXITED:
                await trio.sleep(0.05)

    async def log_path(self, cid: str) -> Path:
        return Path((await self.cri.container_status(cid)).status.log_path)


def collector(cri: CriClient, endpoint: str, settings: GcSettings, desired: set[str], logs: Path) -> GarbageCollector:
    handle = RuntimeHandle(endpoint)
    handle.attach(cri, cri.runtime_version)
    return GarbageCollector(
        settings, runtime=handle, desired=lambda: desired, metrics=GcMetrics(CollectorRegistry()),
        pod_logs_dir=str(logs),
    )


@pytest.mark.containerd
async def test_container_round_removes_only_the_dead_it_should(cri, containerd, tmp_path):
    logs = tmp_path / "pod-logs"
    runtime = Runtime(cri, logs)

    kept_pod = make_pod("gc-kept")  # still desired
    stale_sandbox, _ = await runtime.sandbox(kept_pod, attempt=0)
    await cri.stop_pod_sandbox(stale_sandbox)
    sandbox = await runtime.sandbox(kept_pod, attempt=1)
    dead = [await runtime.container(kept_pod, sandbox, "app", restart_count=n) for n in range(3)]
    side = await runtime.container(kept_pod, sandbox, "side")
    dead_logs = [await runtime.log_path(cid) for cid in dead]
    assert all(path.exists() for path in dead_logs)

    gone_pod = make_pod("gc-gone")  # deleted: no source wants it any more
    gone_sandbox = await runtime.sandbox(gone_pod)
    gone_dead = await runtime.container(gone_pod, gone_sandbox, "app")
    await cri.stop_pod_sandbox(gone_sandbox[0])
    gone_log_dir = Path(pod_log_directory(str(logs), gone_pod))
    assert gone_log_dir.is_dir()

    foreign_pod = make_pod("gc-foreign")  # not made by pykubelet: never touched
    foreign_sandbox = await runtime.sandbox(foreign_pod, managed=False)
    foreign = [await runtime.container(foreign_pod, foreign_sandbox, "app", restart_count=n, managed=False)
               for n in range(2)]

    gc = collector(cri, containerd.endpoint, GcSettings(), {kept_pod.metadata.uid}, logs)
    await gc.collect_containers()

    containers = {c.id: c for c in await cri.list_containers()}
    assert dead[0] not in containers and dead[1] not in containers
    assert containers[dead[2]].state == api_pb2.CONTAINER_EXITED  # the newest dead "app" stays
    assert containers[side].state == api_pb2.CONTAINER_RUNNING
    assert gone_dead not in containers
    assert all(cid in containers for cid in foreign)
    assert [path.exists() for path in dead_logs] == [False, False, True]

    sandboxes = {s.id for s in await cri.list_pod_sandbox()}
    assert stale_sandbox not in sandboxes and gone_sandbox[0] not in sandboxes
    assert sandbox[0] in sandboxes and foreign_sandbox[0] in sandboxes
    assert not gone_log_dir.exists()
    assert Path(pod_log_directory(str(logs), kept_pod)).is_dir()
    assert Path(pod_log_directory(str(logs), foreign_pod)).is_dir()


def build_unused_image(path: Path) -> Path:
    layer = _Layer()
    layer.add_file("gc-unused", b"nothing uses this image\n")
    _write_oci_archive(path, UNUSED_IMAGE, layer.finish(), {"Cmd": ["/gc-unused"]})
    return path


@pytest.mark.containerd
async def test_image_round_removes_an_unused_image_and_keeps_those_in_use(
    fresh_containerd, tmp_path
):
    # A containerd of its own: with thresholds at 0 this round removes every unused image.
    containerd = fresh_containerd
    containerd.ctr("images", "import", str(build_unused_image(tmp_path / "unused.tar")))
    containerd.ctr("images", "tag", "--force", BUSYBOX_IMAGE, BUSYBOX_ALIAS)
    logs = tmp_path / "pod-logs"
    metrics = RuntimeOperationMetrics(CollectorRegistry())
    async with CriClient(containerd.endpoint, request_timeout=10, metrics=metrics) as cri:
        runtime = Runtime(cri, logs)
        pod = make_pod("gc-images")
        await runtime.container(pod, await runtime.sandbox(pod), "side")
        names = {tag for image in await cri.list_images() for tag in image.repo_tags}
        assert {UNUSED_IMAGE, BUSYBOX_IMAGE, BUSYBOX_ALIAS, PAUSE_IMAGE} <= names

        settings = GcSettings(image_high=0, image_low=0, image_min_age=0)
        gc = collector(cri, containerd.endpoint, settings, {pod.metadata.uid}, logs)
        await gc.collect_images()

        names = {tag for image in await cri.list_images() for tag in image.repo_tags}
        assert UNUSED_IMAGE not in names
        # In use by a running container (the alias is the same image), and the sandbox image.
        assert {BUSYBOX_IMAGE, BUSYBOX_ALIAS, PAUSE_IMAGE} <= names
        assert gc.images.metrics.images_collected.labels("space")._value.get() == 1
