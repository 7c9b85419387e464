"""Image garbage collection (Go: realImageGCManager): above the high threshold of the
image filesystem, the least recently used images no container uses go until the low one
is reached; the eviction manager asks for every unused image under disk pressure.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.pods.gc import GcImage, ImageFsUsage, ImageRecord, InvalidImageFs, detect_images, images_to_remove
from pykubelet.ports.cri import CriCallError, CriClient, CriNotFound

if TYPE_CHECKING:
    from .collector import GcMetrics, GcSettings

log = logging.getLogger("pykubelet.gc")


class ImageCollector:
    """Remembers the images it has seen (first seen, last used) for the life of the actor,
    as Go's image GC manager does for the kubelet's."""

    def __init__(
        self,
        settings: GcSettings,
        *,
        runtime: RuntimeHandle,
        metrics: GcMetrics,
        wall_clock: Callable[[], float],
        fs_usage: Callable[[str], ImageFsUsage],
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.metrics = metrics
        self.wall_clock = wall_clock
        self.fs_usage = fs_usage
        self.records: dict[str, ImageRecord] = {}

    async def collect(self, *, every_unused: bool = False) -> None:
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
        self.records = detect_images(self.records, images, in_use, now)
        fs = await self._image_fs(cri)
        plan = images_to_remove(
            images, fs, in_use, self.records, now,
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
                self.records.pop(image.id, None)
                continue
            except CriCallError as exc:  # go on with the next, as Go does
                log.warning("cannot remove image %s (%s): %s", image.id, ", ".join(image.tags), exc)
                continue
            self.records.pop(image.id, None)
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
