"""Garbage collection decisions (pure): which dead containers, sandboxes, pod log
directories and images to remove. The gc actor (actors/gc/) lists the runtime, asks
these functions and does the removals.

Go kubelet equivalents: kuberuntime/kuberuntime_gc.go (containers, sandboxes, pod log
directories) and images/image_gc_manager.go (images). Times are Unix seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import msgspec

ContainerState = Literal["created", "running", "exited", "unknown"]


class GcContainer(msgspec.Struct, frozen=True, kw_only=True):
    """One container as listed by the runtime (ListContainers, plus finished_at when known)."""

    id: str
    pod_uid: str
    name: str  # the container's name in its pod (io.kubernetes.container.name)
    state: ContainerState
    created_at: float
    finished_at: float | None = None
    sandbox_id: str = ""
    managed: bool = True  # carries io.pykubelet.managed=true


class GcSandbox(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    pod_uid: str
    ready: bool
    created_at: float
    managed: bool = True


class GcImage(msgspec.Struct, frozen=True, kw_only=True):
    id: str  # the runtime's image id (sha256:...)
    size: int = 0
    tags: tuple[str, ...] = ()  # repo tags and digests: containers may name an image by them
    pinned: bool = False  # the runtime asks never to remove it (e.g. its sandbox image)


class ImageRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the kubelet remembers of an image across rounds (Go's imageRecord)."""

    first_seen: float  # when this kubelet first detected the image
    last_used: float = 0.0  # last time it was seen in use by a container; 0 = never


class ImageFsUsage(msgspec.Struct, frozen=True, kw_only=True):
    """The filesystem that holds the images: sizes in bytes."""

    capacity: int
    available: int


class InvalidImageFs(ValueError):
    """The image filesystem reports no capacity, so no usage can be computed."""


class ImageGcPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What image GC should do this round.

    `candidates` are the images that may go, least recently used first; remove them in
    order until `bytes_to_free` is freed (a failed removal moves on to the next, as Go).
    """

    usage_percent: int
    bytes_to_free: int = 0
    candidates: list[GcImage] = []

    @property
    def remove(self) -> list[str]:
        """The ids to remove when every removal succeeds: the shortest prefix of the
        candidates whose sizes reach bytes_to_free."""
        ids, freed = [], 0
        for image in self.candidates:
            if freed >= self.bytes_to_free:
                break
            ids.append(image.id)
            freed += image.size
        return ids


# --- containers -------------------------------------------------------------------------


def containers_to_remove(
    containers: Iterable[GcContainer],
    *,
    desired_pod_uids: set[str] | None,
    now: float,
    min_age: float = 0.0,
    max_per_pod_container: int = 1,
    max_containers: int = -1,
) -> list[str]:
    """The dead containers to remove, oldest first within each step (Go's evictContainers).

    Only managed, exited containers dead for at least `min_age` seconds (since they
    finished, or were created when the finish time is unknown) are evictable; running,
    created and unknown ones never are. `desired_pod_uids` is the pods the kubelet still
    wants, or None while not every source has been seen: then no pod counts as deleted.
    Every evictable container of a deleted pod goes; of the others, each (pod, container
    name) keeps its newest `max_per_pod_container` (Go's MaxPerPodContainer, default 1,
    negative = no limit), and `max_containers` (negative = no limit) caps the node's total:
    first an equal share per (pod, container name), at least one, then oldest first.
    """
    units: dict[tuple[str, str], list[GcContainer]] = {}
    for container in containers:
        if not container.managed or container.state != "exited":
            continue
        died = container.finished_at if container.finished_at is not None else container.created_at
        if now - died < min_age:
            continue
        units.setdefault((container.pod_uid, container.name), []).append(container)
    for unit in units.values():
        unit.sort(key=_newest_first)

    removed: list[str] = []
    if desired_pod_uids is not None:
        for key in [key for key in units if key[0] not in desired_pod_uids]:
            removed += _oldest_ids(units.pop(key), 0)  # all of them
    if max_per_pod_container >= 0:
        removed += _keep_newest(units, max_per_pod_container)
    total = sum(len(unit) for unit in units.values())
    if max_containers >= 0 and total > max_containers:
        removed += _keep_newest(units, max(max_containers // len(units), 1))
        remaining = sorted((c for unit in units.values() for c in unit), key=_newest_first)
        if len(remaining) > max_containers:
            removed += [c.id for c in reversed(remaining[max_containers:])]
    return removed


def _newest_first(item: GcContainer | GcSandbox) -> tuple[float, str]:
    # Go sorts by creation time, newest first; the id only makes ties deterministic.
    return (-item.created_at, item.id)


def _oldest_ids(unit: list[GcContainer], keep: int) -> list[str]:
    return [c.id for c in reversed(unit[keep:])]


def _keep_newest(units: dict[tuple[str, str], list[GcContainer]], keep: int) -> list[str]:
    """Trim every unit (sorted newest first) to its newest `keep`; the ids trimmed."""
    removed: list[str] = []
    for key, unit in units.items():
        if len(unit) > keep:
            removed += _oldest_ids(unit, keep)
            units[key] = unit[:keep]
    return removed


# --- sandboxes --------------------------------------------------------------------------


def sandboxes_to_remove(
    sandboxes: Iterable[GcSandbox],
    containers: Iterable[GcContainer],
    *,
    desired_pod_uids: set[str] | None,
) -> list[str]:
    """The sandboxes to remove (Go's evictSandboxes): managed, not ready, and no container
    (of any state) left in them. A deleted pod loses all such sandboxes; a pod that still
    exists (or any pod, while `desired_pod_uids` is None) keeps its newest sandbox
    whatever its state, since the pod worker reads the pod's state from it."""
    in_use = {c.sandbox_id for c in containers}
    by_pod: dict[str, list[GcSandbox]] = {}
    for sandbox in sandboxes:
        if sandbox.managed:
            by_pod.setdefault(sandbox.pod_uid, []).append(sandbox)
    removed: list[str] = []
    for uid, pod_sandboxes in by_pod.items():
        pod_sandboxes.sort(key=_newest_first)
        deleted = desired_pod_uids is not None and uid not in desired_pod_uids
        candidates = pod_sandboxes if deleted else pod_sandboxes[1:]
        removed += [s.id for s in reversed(candidates) if not s.ready and s.id not in in_use]
    return removed


# --- pod log directories ----------------------------------------------------------------


def pod_uid_of_log_directory(name: str) -> str:
    """"<namespace>_<name>_<uid>" -> uid (Go's parsePodUIDFromLogsDirectory)."""
    return name.rsplit("_", 1)[-1]


def pod_log_dirs_to_remove(
    names: Iterable[str], *, desired_pod_uids: set[str] | None, live_pod_uids: set[str]
) -> list[str]:
    """The pod log directories (names under --pod-logs-dir) to remove: those of deleted
    pods that have no sandbox or container left in the runtime. Nothing while not every
    source has been seen (`desired_pod_uids` None), as Go waits for allSourcesReady."""
    if desired_pod_uids is None:
        return []
    return sorted(
        name
        for name in names
        if (uid := pod_uid_of_log_directory(name)) not in desired_pod_uids and uid not in live_pod_uids
    )


def pod_dirs_to_remove(uids: Iterable[str], *, desired_pod_uids: set[str] | None, live_pod_uids: set[str]) -> list[str]:
    """The pod directories (<root-dir>/pods/<uid>: volumes, /etc/hosts, termination
    messages) to remove: those of pods gone while nothing was left to terminate them (a
    kubelet down when they were deleted). Go: cleanupOrphanedPodDirs. The same rule as
    for log directories, and for pod cgroups (cleanupOrphanedPodCgroups)."""
    if desired_pod_uids is None:
        return []
    return sorted(uid for uid in uids if uid not in desired_pod_uids and uid not in live_pod_uids)


# --- images -----------------------------------------------------------------------------


def detect_images(
    records: Mapping[str, ImageRecord], images: Iterable[GcImage], in_use: set[str], now: float
) -> dict[str, ImageRecord]:
    """The image records after one look at the runtime (Go's detectImages): a new image is
    first seen now, an image in use was last used now, a vanished image is forgotten."""
    updated: dict[str, ImageRecord] = {}
    for image in images:
        record = records.get(image.id) or ImageRecord(first_seen=now)
        if is_image_in_use(image, in_use):
            record = msgspec.structs.replace(record, last_used=now)
        updated[image.id] = record
    return updated


def is_image_in_use(image: GcImage, in_use: set[str]) -> bool:
    """`in_use` holds image ids and the references containers were created from."""
    return image.id in in_use or any(tag in in_use for tag in image.tags)


def image_usage_percent(fs: ImageFsUsage) -> int:
    """Go: 100 - int(available*100/capacity), with available capped at capacity."""
    if fs.capacity <= 0:
        raise InvalidImageFs("invalid capacity 0 on image filesystem")
    available = min(max(fs.available, 0), fs.capacity)
    return 100 - available * 100 // fs.capacity


def images_to_remove(
    images: Iterable[GcImage],
    fs: ImageFsUsage,
    in_use: set[str],
    records: Mapping[str, ImageRecord],
    now: float,
    *,
    high: int = 85,
    low: int = 80,
    min_age: float = 120.0,
) -> ImageGcPlan:
    """Image GC (Go's GarbageCollect + freeSpace): when the image filesystem's usage is at
    or above `high` percent, free enough to bring it down to `low` percent, removing least
    recently used images first (never used before used; ties: first seen first). Never an
    image in use by any container (whatever its state) or pinned, nor one this kubelet
    first saw less than `min_age` seconds ago (it may just have been pulled for a
    container about to start). `high` 100 disables image GC. Raises InvalidImageFs when
    the filesystem has no capacity."""
    usage = image_usage_percent(fs)
    if high >= 100 or usage < high:
        return ImageGcPlan(usage_percent=usage)
    available = min(max(fs.available, 0), fs.capacity)
    bytes_to_free = fs.capacity * (100 - low) // 100 - available
    if bytes_to_free <= 0:
        return ImageGcPlan(usage_percent=usage)
    candidates = []
    for image in images:
        record = records.get(image.id) or ImageRecord(first_seen=now)
        if image.pinned or is_image_in_use(image, in_use) or record.last_used >= now:
            continue
        if now - record.first_seen < min_age:
            continue
        candidates.append((record.last_used, record.first_seen, image.id, image))
    candidates.sort(key=lambda item: item[:3])
    return ImageGcPlan(
        usage_percent=usage, bytes_to_free=bytes_to_free, candidates=[item[3] for item in candidates]
    )
