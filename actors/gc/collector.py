"""The gc actor: a container round every minute and an image round every five minutes
while the runtime is connected, with Go kubelet's defaults; a failed round is logged once
per new problem and tried again at the next period.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio
from prometheus_client import CollectorRegistry, Counter, Histogram

from pykubelet.actors.container_manager import ContainerManager
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.actors.volumes.manager import VolumeManager
from pykubelet.pods.gc import ImageFsUsage, InvalidImageFs
from pykubelet.ports.cri import CriError
from pykubelet.supervisor import ActorContext

from .containers import ContainerCollector
from .images import ImageCollector

log = logging.getLogger("pykubelet.gc")

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


def gc_actor(new_collector: Callable[[], GarbageCollector], *,
             on_start: Callable[[GarbageCollector], None] | None = None):
    """Each incarnation runs the rounds of a collector of its own, made by `new_collector`
    (a GarbageCollector's arguments bound, e.g. with functools.partial). `on_start` is given
    each incarnation's collector (the eviction manager's node-level reclaim runs its rounds)."""

    async def run(ctx: ActorContext) -> None:
        collector = new_collector()
        settings, runtime = collector.settings, collector.runtime
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
    """Both kinds of round for one incarnation of the actor (the eviction manager's
    node-level reclaim runs them too). `wall_clock` dates the CRI's timestamps (Unix time);
    the periods run on trio's clock. `volumes`, `containers`: whose pod directories and pod
    cgroups to clean up (None: none)."""

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
        self.settings, self.runtime = settings, runtime
        self.containers = ContainerCollector(
            settings, runtime=runtime, desired=desired, metrics=metrics, pod_logs_dir=pod_logs_dir,
            volumes=volumes, containers=containers, wall_clock=wall_clock,
        )
        self.images = ImageCollector(settings, runtime=runtime, metrics=metrics, wall_clock=wall_clock, fs_usage=fs_usage)

    async def collect_containers(self) -> None:
        await self.containers.collect()

    async def collect_images(self, *, every_unused: bool = False) -> None:
        """Every image not in use and past the minimum age with `every_unused`, whatever
        the usage (Go: DeleteUnusedImages, the eviction manager's reclaim)."""
        await self.images.collect(every_unused=every_unused)
