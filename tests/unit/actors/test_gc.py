"""The gc actor on MockClock against a fake CRI: what each round removes, when rounds run,
and that a failing runtime is logged, not fatal."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import trio
from cri_api.v1 import api_pb2
from prometheus_client import CollectorRegistry

from pykubelet.actors.gc import GarbageCollector, GcMetrics, GcSettings, gc_actor
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.pods.gc import ImageFsUsage
from pykubelet.pods.labels import CONTAINER_NAME_LABEL, MANAGED_LABEL, POD_UID_LABEL
from pykubelet.ports.cri import CriNotFound, RuntimeStatus, RuntimeUnavailable, RuntimeVersion
from pykubelet.supervisor import ChildSpec
from tests.support.actors import running

SECOND = 1_000_000_000
WALL_START = 1_000_000.0
PAUSE = "registry.local/pause:1"


def _selected(labels, selector) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


class FakeCri:
    """The CRI calls the gc actor makes, over in-memory sandboxes, containers and images."""

    endpoint = "unix:///fake.sock"

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.sandboxes: dict[str, api_pb2.PodSandbox] = {}
        self.containers: dict[str, api_pb2.Container] = {}
        self.log_paths: dict[str, str] = {}
        self.images: dict[str, api_pb2.Image] = {}
        self.removed: list[str] = []
        self.fail_next_list = False

    # -- building the runtime's state ---------------------------------------------------

    def sandbox(self, sid: str, uid: str, *, created: float, ready: bool = False, managed: bool = True) -> None:
        labels = {POD_UID_LABEL: uid, **({MANAGED_LABEL: "true"} if managed else {})}
        self.sandboxes[sid] = api_pb2.PodSandbox(
            id=sid, metadata=api_pb2.PodSandboxMetadata(name=f"p-{uid}", uid=uid, namespace="default"),
            state=api_pb2.SANDBOX_READY if ready else api_pb2.SANDBOX_NOTREADY,
            created_at=int(created * SECOND), labels=labels,
        )

    def container(self, cid: str, uid: str, name: str, *, sandbox: str, created: float, state: str = "exited",
                  managed: bool = True, image: str = "sha256:busybox") -> Path:
        labels = {POD_UID_LABEL: uid, CONTAINER_NAME_LABEL: name, **({MANAGED_LABEL: "true"} if managed else {})}
        states = {"running": api_pb2.CONTAINER_RUNNING, "exited": api_pb2.CONTAINER_EXITED}
        self.containers[cid] = api_pb2.Container(
            id=cid, pod_sandbox_id=sandbox, metadata=api_pb2.ContainerMetadata(name=name),
            image=api_pb2.ImageSpec(image=image), image_ref=image, state=states[state],
            created_at=int(created * SECOND), labels=labels,
        )
        log = self.log_dir / f"default_p-{uid}_{uid}" / name / f"{cid}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("2024-01-01T00:00:00Z stdout F hello\n")
        self.log_paths[cid] = str(log)
        return log

    def image(self, iid: str, *tags: str, size: int = 30, pinned: bool = False) -> None:
        self.images[iid] = api_pb2.Image(id=iid, repo_tags=list(tags), size=size, pinned=pinned)

    def _not_found(self, operation: str, what: str) -> CriNotFound:
        return CriNotFound(endpoint=self.endpoint, operation=operation, code="NOT_FOUND", detail=f"{what} not found")

    # -- RuntimeService -----------------------------------------------------------------

    async def list_containers(self, filter=None):
        selector = dict(filter.label_selector) if filter is not None else {}
        return [c for c in self.containers.values() if _selected(c.labels, selector)]

    async def list_pod_sandbox(self, filter=None):
        if self.fail_next_list:
            self.fail_next_list = False
            raise RuntimeUnavailable(endpoint=self.endpoint, operation="list_podsandbox", detail="connect: refused")
        selector = dict(filter.label_selector) if filter is not None else {}
        return [s for s in self.sandboxes.values() if _selected(s.labels, selector)]

    async def container_status(self, cid, verbose=False):
        if cid not in self.containers:
            raise self._not_found("container_status", cid)
        c = self.containers[cid]
        return api_pb2.ContainerStatusResponse(status=api_pb2.ContainerStatus(
            id=cid, state=c.state, created_at=c.created_at, labels=c.labels, log_path=self.log_paths[cid],
        ))

    async def remove_container(self, cid):
        if self.containers.pop(cid, None) is None:
            raise self._not_found("remove_container", cid)
        self.removed.append(cid)

    async def stop_pod_sandbox(self, sid):
        if sid not in self.sandboxes:
            raise self._not_found("stop_podsandbox", sid)

    async def remove_pod_sandbox(self, sid):
        if self.sandboxes.pop(sid, None) is None:
            raise self._not_found("remove_podsandbox", sid)
        self.removed.append(sid)

    async def status(self, verbose=False):
        return RuntimeStatus(conditions=[], info={"config": json.dumps({"sandboxImage": PAUSE})} if verbose else {})

    # -- ImageService -------------------------------------------------------------------

    async def list_images(self, filter=None):
        return list(self.images.values())

    async def image_status(self, image, verbose=False):
        for candidate in self.images.values():
            if image == candidate.id or image in candidate.repo_tags:
                return api_pb2.ImageStatusResponse(image=candidate)
        return api_pb2.ImageStatusResponse()

    async def remove_image(self, image):
        if self.images.pop(image, None) is None:
            raise self._not_found("remove_image", image)
        self.removed.append(image)

    async def image_fs_info(self):
        usage = api_pb2.FilesystemUsage(fs_id=api_pb2.FilesystemIdentifier(mountpoint="/images"))
        return api_pb2.ImageFsInfoResponse(image_filesystems=[usage])


@pytest.fixture(autouse=True)
def threads_inline_on_virtual_time(request, monkeypatch):
    """The disk work goes to worker threads, which the autojump clock does not wait for: it
    would jump virtual time while one runs. On virtual time, run it inline instead."""
    if "autojump_clock" not in request.fixturenames:
        return

    async def inline(fn, *args, **_):
        await trio.lowlevel.checkpoint()
        return fn(*args)

    monkeypatch.setattr(trio.to_thread, "run_sync", inline)


class Harness:
    def __init__(self, tmp_path: Path, settings: GcSettings, desired: set[str] | None) -> None:
        self.logs = tmp_path / "pod-logs"
        self.logs.mkdir()
        self.cri = FakeCri(self.logs)
        self.desired = desired
        self.registry = CollectorRegistry()
        self.fs = ImageFsUsage(capacity=100, available=100)
        self.handle = RuntimeHandle(self.cri.endpoint)
        self.handle.attach(self.cri, RuntimeVersion("fake", "1", "v1", "0.1.0"))
        self.spec = ChildSpec("gc", gc_actor(functools.partial(
            GarbageCollector, settings, runtime=self.handle, desired=lambda: self.desired,
            metrics=GcMetrics(self.registry), pod_logs_dir=str(self.logs),
            wall_clock=lambda: WALL_START + trio.current_time(), fs_usage=self.fs_usage,
        )))

    def fs_usage(self, mountpoint: str) -> ImageFsUsage:
        assert mountpoint == "/images"
        return self.fs

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def take_removed(self) -> list[str]:
        removed, self.cri.removed = self.cri.removed, []
        return removed


async def test_container_round_removes_dead_containers_their_logs_and_empty_sandboxes(autojump_clock, tmp_path):
    h = Harness(tmp_path, GcSettings(), desired={"u1"})
    cri = h.cri
    cri.sandbox("s0", "u1", created=0)  # an older attempt of u1: not ready, empty
    cri.sandbox("s1", "u1", created=1, ready=True)
    old_log = cri.container("c1", "u1", "app", sandbox="s1", created=1)
    newest_log = cri.container("c2", "u1", "app", sandbox="s1", created=2)
    cri.container("c3", "u1", "side", sandbox="s1", created=3, state="running")
    cri.sandbox("t1", "u2", created=1)  # u2 was deleted
    deleted_log = cri.container("d1", "u2", "app", sandbox="t1", created=1)
    cri.sandbox("x", "stranger", created=0, managed=False)
    cri.container("x1", "stranger", "app", sandbox="x", created=1, managed=False)
    cri.container("x2", "stranger", "app", sandbox="x", created=2, managed=False)  # logs in default_p-stranger_...
    (h.logs / "default_p-u3_u3" / "app").mkdir(parents=True)  # a pod long gone

    async with running(h.spec):
        await trio.sleep(1)
        assert sorted(h.take_removed()) == ["c1", "d1", "s0", "t1"]
        assert not old_log.exists() and not deleted_log.exists() and newest_log.exists()
        assert sorted(p.name for p in h.logs.iterdir()) == ["default_p-stranger_stranger", "default_p-u1_u1"]
        assert h.metric("pykubelet_gc_removed_containers_total") == 2
        assert h.metric("pykubelet_gc_removed_sandboxes_total") == 2
        assert h.metric("pykubelet_gc_duration_seconds_count", kind="containers") == 1

        h.desired = set()  # u1 deleted too: its dead container goes at the next round, a minute on
        await trio.sleep(30)
        assert h.take_removed() == []
        await trio.sleep(31)
        assert h.take_removed() == ["c2"]  # s1 is ready and c3 still runs: both stay
        assert set(cri.containers) == {"c3", "x1", "x2"} and set(cri.sandboxes) == {"s1", "x"}
        assert (h.logs / "default_p-u1_u1").exists()  # its sandbox lives


async def test_a_gc_stopped_during_a_slow_disk_clean_up_stops_at_once(tmp_path, monkeypatch):
    """Its supervisor restarting it (rest_for_one behind a crashed sibling) must not wait
    for the disk: the removal goes on in its thread."""
    import threading

    from pykubelet.actors.gc import containers as gc_module

    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow_removal(paths: list[str]) -> int:
        started.set()
        release.wait(30)
        finished.set()
        return 0

    monkeypatch.setattr(gc_module, "_remove_pod_log_dirs", slow_removal)
    h = Harness(tmp_path, GcSettings(), desired=set())
    (h.logs / "default_p-u3_u3").mkdir()
    try:
        async with running(h.spec):
            await trio.to_thread.run_sync(started.wait)
        assert not finished.is_set()  # left the context (cancelled gc) while the disk was busy
    finally:
        release.set()


async def test_until_all_sources_are_seen_no_pod_counts_as_deleted(autojump_clock, tmp_path):
    h = Harness(tmp_path, GcSettings(), desired=None)
    h.cri.sandbox("t0", "u2", created=0)
    h.cri.sandbox("t1", "u2", created=1)
    h.cri.container("d1", "u2", "app", sandbox="t1", created=1)
    h.cri.container("d2", "u2", "app", sandbox="t1", created=2)
    (h.logs / "default_p-u9_u9").mkdir()
    async with running(h.spec):
        await trio.sleep(1)
    assert sorted(h.take_removed()) == ["d1", "t0"]
    assert (h.logs / "default_p-u9_u9").exists()


async def test_a_failing_runtime_is_logged_and_retried_next_round(autojump_clock, tmp_path, caplog):
    h = Harness(tmp_path, GcSettings(), desired={"u1"})
    h.cri.sandbox("s1", "u1", created=1, ready=True)
    h.cri.container("c1", "u1", "app", sandbox="s1", created=1)
    h.cri.container("c2", "u1", "app", sandbox="s1", created=2)
    h.cri.fail_next_list = True
    async with running(h.spec) as tree:
        await trio.sleep(1)
        assert h.take_removed() == []
        assert "container garbage collection failed" in caplog.text
        await trio.sleep(60)
        assert h.take_removed() == ["c1"]
        assert tree.snapshot().children[0].restarts == 0


async def test_image_round_frees_least_recently_used_unused_images(autojump_clock, tmp_path):
    settings = GcSettings(image_min_age=0)
    h = Harness(tmp_path, settings, desired={"u1"})
    cri = h.cri
    cri.sandbox("s1", "u1", created=1, ready=True)
    cri.container("c1", "u1", "app", sandbox="s1", created=1, state="running", image="sha256:busybox")
    cri.container("c2", "u1", "old", sandbox="s1", created=1, state="running", image="sha256:old")
    cri.container("x1", "stranger", "app", sandbox="s1", created=1, managed=False, image="sha256:theirs")
    cri.image("sha256:busybox", "localhost/busybox:1")
    cri.image("sha256:pause", PAUSE)
    cri.image("sha256:theirs", "localhost/theirs:1")
    cri.image("sha256:pinned", "localhost/pinned:1", pinned=True)
    cri.image("sha256:old", "localhost/old:1")  # in use now, not at the next round
    cri.image("sha256:never", "localhost/never:1")
    h.fs = ImageFsUsage(capacity=100, available=10)  # 90%: free 10 bytes to reach 80%

    async with running(h.spec):
        await trio.sleep(1)
        assert "sha256:never" not in cri.images  # the one image nobody uses
        assert h.metric("kubelet_image_garbage_collected_total", reason="space") == 1

        del cri.containers["c2"]  # sha256:old was last used at the first round
        cri.image("sha256:newer", "localhost/newer:1")  # never used: goes before sha256:old
        await trio.sleep(300)
        assert set(cri.images) == {"sha256:busybox", "sha256:pause", "sha256:theirs", "sha256:pinned", "sha256:old"}
        await trio.sleep(300)
        assert set(cri.images) == {"sha256:busybox", "sha256:pause", "sha256:theirs", "sha256:pinned"}
        assert h.metric("pykubelet_gc_removed_images_total") == 3

        h.fs = ImageFsUsage(capacity=100, available=16)  # 84%: below the high threshold
        cri.image("sha256:spare", "localhost/spare:1")
        await trio.sleep(300)
        assert "sha256:spare" in cri.images


async def test_images_first_seen_within_min_age_stay(autojump_clock, tmp_path):
    h = Harness(tmp_path, GcSettings(image_min_age=120), desired=set())
    h.cri.image("sha256:fresh", "localhost/fresh:1")
    h.fs = ImageFsUsage(capacity=100, available=0)
    async with running(h.spec):
        await trio.sleep(1)
        assert "sha256:fresh" in h.cri.images  # first seen now: maybe pulled for a pod
        await trio.sleep(300)
        assert "sha256:fresh" not in h.cri.images


def test_settings_refuse_bad_thresholds():
    with pytest.raises(ValueError, match="imageGCLowThresholdPercent 90"):
        GcSettings(image_high=85, image_low=90)
    with pytest.raises(ValueError, match="imageGCHighThresholdPercent 101"):
        GcSettings(image_high=101)
