"""The garbage collector: removes dead containers, empty sandboxes and the logs of both
every minute, and unused images every five minutes when the image filesystem fills up.

It lists the runtime over CRI, asks the pure decisions in pods/gc.py and removes what they
name. Containers and sandboxes without io.pykubelet.managed are never touched; images
carry no such label, so image GC weighs every image against every container in the
runtime, managed or not. Which pods still exist comes from the sync loop (`desired`).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec
import trio
from cri_api.v1 import api_pb2
from prometheus_client import CollectorRegistry, Counter, Histogram

from pykubelet.actors.container_manager import ContainerManager
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.actors.volumes.manager import VolumeManager
from pykubelet.pods.gc import (
    GcContainer,
    GcImage,
    GcSandbox,
    ImageFsUsage,
    ImageRecord,
    InvalidImageFs,
    containers_to_remove,
    detect_images,
    images_to_remove,
    pod_dirs_to_remove,
    pod_log_dirs_to_remove,
    sandboxes_to_remove,
)
from pykubelet.pods.labels import CONTAINER_NAME_LABEL, POD_UID_LABEL, is_managed
from pykubelet.ports.cgroups import CgroupError
from pykubelet.ports.cri import CriCallError, CriClient, CriError, CriNotFound
from pykubelet.supervisor import ActorContext
from pykubelet.supervisor.verbosity import V

log = logging.getLogger("pykubelet.gc")

_STATES = {
    api_pb2.CONTAINER_CREATED: "created",
    api_pb2.CONTAINER_RUNNING: "running",
    api_pb2.CONTAINER_EXITED: "exited",
    api_pb2.CONTAINER_UNKNOWN: "unknown",
}
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

DesiredPods = Callable[[], "set[str] | None"]
"""The pod UIDs the kubelet still wants, or None while not every source has been seen
(then no pod counts as deleted, as Go waits for allSourcesReady)."""


@dataclass(frozen=True)
class GcSettings:
    """Go kubelet defaults: container GC every minute (MinAge 0, MaxPerPodContainer 1,
    MaxContainers -1), image GC every five minutes (imageGCHighThresholdPercent 85,
    imageGCLowThresholdPercent 80, imageMinimumGCAge 2m; high 100 disables image GC)."""

    container_period: float = 60.0
    image_period: float = 300.0
    min_age: float = 0.0  # --minimum-container-ttl-duration
    max_per_pod_container: int = 1  # --maximum-dead-containers-per-container
    max_containers: int = -1  # --maximum-dead-containers
    image_high: int = 85
    image_low: int = 80
    image_min_age: float = 120.0
    # An image always kept, as the sandbox (pause) image; "" = ask the runtime (containerd
    # names it in its verbose Status; newer runtimes pin it instead).
    pod_infra_image: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.image_high <= 100:
            raise ValueError(f"imageGCHighThresholdPercent {self.image_high}: must be between 0 and 100")
        if not 0 <= self.image_low <= 100:
            raise ValueError(f"imageGCLowThresholdPercent {self.image_low}: must be between 0 and 100")
        if self.image_low > self.image_high:
            raise ValueError(
                f"imageGCLowThresholdPercent {self.image_low}: must not be above "
                f"imageGCHighThresholdPercent {self.image_high}"
            )
        if self.container_period <= 0 or self.image_period <= 0:
            raise ValueError("gc periods must be positive")


class GcMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.images_collected = Counter(
            "kubelet_image_garbage_collected_total",
            "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
            ["reason"], registry=registry,
        )
        self.removed_containers = Counter(
            "pykubelet_gc_removed_containers_total", "Dead containers removed by garbage collection.",
            registry=registry,
        )
        self.removed_sandboxes = Counter(
            "pykubelet_gc_removed_sandboxes_total", "Pod sandboxes removed by garbage collection.",
            registry=registry,
        )
        self.removed_images = Counter(
            "pykubelet_gc_removed_images_total", "Images removed by garbage collection.", registry=registry,
        )
        self.duration = Histogram(
            "pykubelet_gc_duration_seconds", "Duration of one garbage collection round.", ["kind"],
            buckets=_BUCKETS, registry=registry,
        )


def statvfs_usage(path: str) -> ImageFsUsage:
    """Capacity and space available to unprivileged users, as cAdvisor reports them."""
    fs = os.statvfs(path)
    return ImageFsUsage(capacity=fs.f_blocks * fs.f_frsize, available=fs.f_bavail * fs.f_frsize)


def gc_actor(
    settings: GcSettings,
    *,
    runtime: RuntimeHandle,
    desired: DesiredPods,
    metrics: GcMetrics,
    pod_logs_dir: str,
    volumes: VolumeManager | None = None,
    containers: ContainerManager | None = None,
    wall_clock: Callable[[], float] = time.time,
    fs_usage: Callable[[str], ImageFsUsage] = statvfs_usage,
    on_start: Callable[[GarbageCollector], None] | None = None,
):
    """`on_start` is given each incarnation's collector (the eviction manager's node-level
    reclaim runs its rounds). `wall_clock` dates the CRI's timestamps (Unix time); the periods run on trio's clock.
    `volumes`, `containers`: whose pod directories and pod cgroups to clean up (None: none)."""

    async def run(ctx: ActorContext) -> None:
        collector = GarbageCollector(
            settings, runtime=runtime, desired=desired, metrics=metrics, pod_logs_dir=pod_logs_dir,
            volumes=volumes, containers=containers, wall_clock=wall_clock, fs_usage=fs_usage,
        )
        if on_start is not None:
            on_start(collector)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_every, runtime, settings.container_period, "container", collector.collect_containers)
            if settings.image_high < 100:
                nursery.start_soon(_every, runtime, settings.image_period, "image", collector.collect_images)
            else:
                log.info("image garbage collection disabled (imageGCHighThresholdPercent is 100)")

    return run


async def _every(runtime: RuntimeHandle, period: float, kind: str, collect: Callable[[], Awaitable[None]]) -> None:
    problem: str | None = None
    while True:
        await runtime.wait_connected()
        started = trio.current_time()
        try:
            await collect()
        except (CriError, InvalidImageFs, OSError) as exc:
            if str(exc) != problem:  # one line per new problem, not one per round
                log.warning("%s garbage collection failed: %s", kind, exc)
                problem = str(exc)
        else:
            problem = None
        await trio.sleep_until(started + period)


class GarbageCollector:
    """One round of each kind at a time; remembers the images it has seen (first seen,
    last used) for the life of the actor, as Go's image GC manager does for the kubelet's."""

    def __init__(
        self,
        settings: GcSettings,
        *,
        runtime: RuntimeHandle,
        desired: DesiredPods,
        metrics: GcMetrics,
        pod_logs_dir: str,
        volumes: VolumeManager | None = None,
        containers: ContainerManager | None = None,
        wall_clock: Callable[[], float] = time.time,
        fs_usage: Callable[[str], ImageFsUsage] = statvfs_usage,
    ) -> None:
        self.settings = settings
        self.volumes = volumes
        self.containers = containers
        self.runtime = runtime
        self.desired = desired
        self.metrics = metrics
        self.pod_logs_dir = pod_logs_dir
        self.wall_clock = wall_clock
        self.fs_usage = fs_usage
        self.image_records: dict[str, ImageRecord] = {}

    # -- containers, sandboxes, pod log directories -------------------------------------

    async def collect_containers(self) -> None:
        settings, cri = self.settings, self.runtime.client
        clock = time.perf_counter()
        containers = [_container(c) for c in await cri.list_containers()]
        sandboxes = [_sandbox(s) for s in await cri.list_pod_sandbox()]
        if settings.min_age > 0:
            containers = [await self._with_finish_time(cri, c) for c in containers]
        # Asked after listing: a pod added meanwhile is then desired, not taken for deleted.
        desired = self.desired()
        now = self.wall_clock()

        gone: set[str] = set()
        removed_containers = 0
        for cid in containers_to_remove(
            containers, desired_pod_uids=desired, now=now, min_age=settings.min_age,
            max_per_pod_container=settings.max_per_pod_container, max_containers=settings.max_containers,
        ):
            outcome = await self._remove_container(cri, cid)
            if outcome != "kept":
                gone.add(cid)
            if outcome == "removed":
                removed_containers += 1
                self.metrics.removed_containers.inc()
        containers = [c for c in containers if c.id not in gone]

        removed_sandboxes = 0
        for sid in sandboxes_to_remove(sandboxes, containers, desired_pod_uids=desired):
            outcome = await self._remove_sandbox(cri, sid)
            if outcome != "kept":
                gone.add(sid)
            if outcome == "removed":
                removed_sandboxes += 1
                self.metrics.removed_sandboxes.inc()
        sandboxes = [s for s in sandboxes if s.id not in gone]

        live = {s.pod_uid for s in sandboxes} | {c.pod_uid for c in containers}
        removed_dirs = await self._remove_pod_log_dirs(live)
        if self.volumes is not None:
            for uid in pod_dirs_to_remove(self.volumes.pods_on_disk(), desired_pod_uids=self.desired(), live_pod_uids=live):
                log.info("removing the volumes and files of a pod that is gone", extra={"pod_uid": uid})
                await self.volumes.tear_down(uid)
        if self.containers is not None:
            await self._remove_pod_cgroups(live)
        self.metrics.duration.labels("containers").observe(time.perf_counter() - clock)
        dead = sum(1 for c in containers if c.managed and c.state == "exited")
        level = logging.INFO if removed_containers or removed_sandboxes or removed_dirs else logging.DEBUG
        log.log(
            level,
            "container gc: removed %d containers, %d sandboxes, %d pod log dirs; %d dead containers kept",
            removed_containers, removed_sandboxes, removed_dirs, dead,
        )

    async def _remove_pod_cgroups(self, live: set[str]) -> None:
        """The cgroups of pods gone while nothing was left to remove them (Go:
        cleanupOrphanedPodCgroups); one that cannot be removed now is tried again next time."""
        assert self.containers is not None
        cgroups = await self.containers.pod_cgroups()
        for uid in pod_dirs_to_remove(cgroups, desired_pod_uids=self.desired(), live_pod_uids=live):
            log.info("removing the cgroup of a pod that is gone", extra={"pod_uid": uid, "cgroup": cgroups[uid]})
            try:
                await self.containers.destroy_pod(uid)
            except CgroupError as exc:
                log.warning("pod cgroup not removed: %s", exc, extra={"pod_uid": uid})

    async def _with_finish_time(self, cri: CriClient, container: GcContainer) -> GcContainer:
        if not container.managed or container.state != "exited":
            return container
        try:
            status = (await cri.container_status(container.id)).status
        except CriNotFound:
            return container
        finished = status.finished_at / 1e9 if status.finished_at else None
        return msgspec.structs.replace(container, finished_at=finished)

    async def _remove_container(self, cri: CriClient, cid: str) -> str:
        """Its log files first, then the container (Go's removeContainer: a container whose
        log could not be removed stays, to be retried next round). "removed", "gone"
        (someone else removed it) or "kept"."""
        try:
            status = (await cri.container_status(cid)).status
        except CriNotFound:
            return "gone"
        if not is_managed(dict(status.labels)):
            return "kept"  # never reached through the decisions; a last guard
        try:
            _remove_log_files(status.log_path)
        except OSError as exc:
            log.warning("not removing container %s: its log: %s", cid, exc)
            return "kept"
        try:
            await cri.remove_container(cid)
        except CriNotFound:
            return "gone"
        except CriCallError as exc:  # this one; the others may still go
            log.warning("cannot remove dead container %s: %s", cid, exc)
            return "kept"
        log.log(V(4), "removed dead container %s", cid, extra={
            "pod_uid": status.labels.get(POD_UID_LABEL, ""), "container": status.labels.get(CONTAINER_NAME_LABEL, ""),
        })
        return "removed"

    async def _remove_sandbox(self, cri: CriClient, sid: str) -> str:
        # Go stops the sandbox first, in case it was not stopped (it is not ready, so
        # normally it was); stopping a stopped sandbox is a no-op.
        try:
            await cri.stop_pod_sandbox(sid)
            await cri.remove_pod_sandbox(sid)
        except CriNotFound:
            return "gone"
        except CriCallError as exc:
            log.warning("cannot remove sandbox %s: %s", sid, exc)
            return "kept"
        return "removed"

    async def _remove_pod_log_dirs(self, live: set[str]) -> int:
        """The log directories of pods gone, read and removed in a worker thread that a
        cancelled gc leaves to finish alone (the disk must not hold up a restart)."""
        names = await trio.to_thread.run_sync(_pod_log_dir_names, self.pod_logs_dir, abandon_on_cancel=True)
        # The desired pods once more, after reading the directory: a pod started since the
        # runtime was listed has its log directory, and is desired by now.
        paths = [
            os.path.join(self.pod_logs_dir, name)
            for name in pod_log_dirs_to_remove(names, desired_pod_uids=self.desired(), live_pod_uids=live)
        ]
        if not paths:
            return 0
        return await trio.to_thread.run_sync(_remove_pod_log_dirs, paths, abandon_on_cancel=True)

    # -- images --------------------------------------------------------------------------

    async def collect_images(self, *, every_unused: bool = False) -> None:
        """Image GC above the high threshold down to the low one; `every_unused`: every image
        not in use and past the minimum age, whatever the usage (Go: DeleteUnusedImages, the
        eviction manager's reclaim under disk pressure)."""
        settings, cri = self.settings, self.runtime.client
        clock = time.perf_counter()
        images = [
            GcImage(id=i.id, size=i.size, tags=(*i.repo_tags, *i.repo_digests), pinned=i.pinned)
            for i in await cri.list_images()
        ]
        in_use = await self._images_in_use(cri)
        now = self.wall_clock()
        self.image_records = detect_images(self.image_records, images, in_use, now)
        fs = await self._image_fs(cri)
        plan = images_to_remove(
            images, fs, in_use, self.image_records, now,
            high=0 if every_unused else settings.image_high, low=0 if every_unused else settings.image_low,
            min_age=settings.image_min_age,
        )
        freed = removed = 0
        for image in plan.candidates:
            if freed >= plan.bytes_to_free:
                break
            try:
                await cri.remove_image(image.id)
            except CriNotFound:
                self.image_records.pop(image.id, None)
                continue
            except CriCallError as exc:  # go on with the next, as Go does
                log.warning("cannot remove image %s (%s): %s", image.id, ", ".join(image.tags), exc)
                continue
            self.image_records.pop(image.id, None)
            freed += image.size
            removed += 1
            self.metrics.removed_images.inc()
            self.metrics.images_collected.labels("space").inc()
            log.info(
                "removed image %s (%s) to free %d bytes", image.id, ", ".join(image.tags) or "untagged", image.size
            )
        self.metrics.duration.labels("images").observe(time.perf_counter() - clock)
        if freed < plan.bytes_to_free:
            log.warning(
                "image gc: image filesystem at %d%% (high threshold %d%%): wanted to free %d bytes, "
                "but only found %d bytes eligible to free",
                plan.usage_percent, settings.image_high, plan.bytes_to_free, freed,
            )
        log.log(
            logging.INFO if removed else logging.DEBUG,
            "image gc: image filesystem at %d%%, removed %d images (%d bytes) of %d",
            plan.usage_percent, removed, freed, len(images),
        )

    async def _images_in_use(self, cri: CriClient) -> set[str]:
        """Every image a container uses, whatever its state and whoever made it, by id and
        by the name it was created from; and the sandbox image."""
        in_use: set[str] = set()
        for container in await cri.list_containers():
            in_use.update(ref for ref in (container.image_ref, container.image.image) if ref)
        sandbox_image = self.settings.pod_infra_image or await _runtime_sandbox_image(cri)
        if sandbox_image:
            in_use.add(sandbox_image)
            try:
                found = (await cri.image_status(sandbox_image)).image
            except CriNotFound:
                found = None
            if found is not None and found.id:
                in_use.add(found.id)
        return in_use

    async def _image_fs(self, cri: CriClient) -> ImageFsUsage:
        info = await cri.image_fs_info()
        mountpoints = [fs.fs_id.mountpoint for fs in info.image_filesystems if fs.fs_id.mountpoint]
        if not mountpoints:
            raise InvalidImageFs("the runtime's ImageFsInfo names no image filesystem")
        return self.fs_usage(mountpoints[0])


async def _runtime_sandbox_image(cri: CriClient) -> str:
    """containerd's sandbox_image, from its verbose Status ("config" JSON); "" if none."""
    status = await cri.status(verbose=True)
    try:
        config = json.loads(status.info.get("config", "") or "{}")
    except ValueError:
        return ""
    image = config.get("sandboxImage") if isinstance(config, dict) else None
    return image if isinstance(image, str) else ""


def _remove_log_files(path: str) -> None:
    """The container's CRI log and its rotated copies ("<path>.<timestamp>[.gz]")."""
    if not path or not os.path.isabs(path):
        return
    for name in [path, *glob.glob(glob.escape(path) + ".*")]:
        try:
            os.remove(name)
        except FileNotFoundError:
            pass


def _container(c: api_pb2.Container) -> GcContainer:
    labels = dict(c.labels)
    return GcContainer(
        id=c.id,
        pod_uid=labels.get(POD_UID_LABEL, ""),
        name=labels.get(CONTAINER_NAME_LABEL, c.metadata.name),
        state=_STATES.get(c.state, "unknown"),
        created_at=c.created_at / 1e9,
        sandbox_id=c.pod_sandbox_id,
        managed=is_managed(labels),
    )


def _sandbox(s: api_pb2.PodSandbox) -> GcSandbox:
    labels = dict(s.labels)
    return GcSandbox(
        id=s.id,
        pod_uid=labels.get(POD_UID_LABEL) or s.metadata.uid,
        ready=s.state == api_pb2.SANDBOX_READY,
        created_at=s.created_at / 1e9,
        managed=is_managed(labels),
    )


def _pod_log_dir_names(pod_logs_dir: str) -> list[str]:
    try:
        return [entry.name for entry in os.scandir(pod_logs_dir) if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def _remove_pod_log_dirs(paths: list[str]) -> int:
    removed = 0
    for path in paths:
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot remove pod log directory %s: %s", path, exc)
            continue
        removed += 1
    return removed
