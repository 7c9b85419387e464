"""Container garbage collection (Go: containerGC): dead containers, their logs first;
sandboxes left empty; and the log directories, volumes and cgroups of pods that are gone.
The decisions are pods/gc.py's; the disk is cleaned in worker threads a cancel leaves alone.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

import msgspec
import trio
from prometheus_client import Counter

from pykubelet.actors.container_manager import ContainerManager
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.actors.volumes.manager import VolumeManager
from pykubelet.messages.cri_api import api_pb2
from pykubelet.pods.gc import (
    GcContainer,
    GcSandbox,
    containers_to_remove,
    pod_dirs_to_remove,
    pod_log_dirs_to_remove,
    sandboxes_to_remove,
)
from pykubelet.pods.labels import CONTAINER_NAME_LABEL, POD_UID_LABEL, is_managed
from pykubelet.ports.cgroups import CgroupError
from pykubelet.ports.cri import CriCallError, CriClient, CriNotFound
from pykubelet.ports.cri.pods import CONTAINER_STATES
from pykubelet.supervisor.verbosity import V

if TYPE_CHECKING:
    from .collector import DesiredPods, GcMetrics, GcSettings

log = logging.getLogger("pykubelet.gc")

class ContainerCollector:
    """One container round at a time; keeps nothing between rounds."""

    def __init__(
        self,
        settings: GcSettings,
        *,
        runtime: RuntimeHandle,
        desired: DesiredPods,
        metrics: GcMetrics,
        pod_logs_dir: str,
        volumes: VolumeManager | None,
        containers: ContainerManager | None,
        wall_clock: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.desired = desired
        self.metrics = metrics
        self.pod_logs_dir = pod_logs_dir
        self.volumes = volumes
        self.containers = containers
        self.wall_clock = wall_clock

    async def collect(self) -> None:
        settings, cri = self.settings, self.runtime.client
        clock = time.perf_counter()
        containers = [_container(c) for c in await cri.list_containers()]
        sandboxes = [_sandbox(s) for s in await cri.list_pod_sandbox()]
        if settings.min_age > 0:
            containers = [await self._with_finish_time(cri, c) for c in containers]
        # Asked after listing: a pod added meanwhile is then desired, not taken for deleted.
        desired = self.desired()
        now = self.wall_clock()

        gone, removed_containers = await _remove_each(
            containers_to_remove(
                containers, desired_pod_uids=desired, now=now, min_age=settings.min_age,
                max_per_pod_container=settings.max_per_pod_container, max_containers=settings.max_containers,
            ),
            functools.partial(self._remove_container, cri), self.metrics.removed_containers,
        )
        containers = [c for c in containers if c.id not in gone]
        gone, removed_sandboxes = await _remove_each(
            sandboxes_to_remove(sandboxes, containers, desired_pod_uids=desired),
            functools.partial(self._remove_sandbox, cri), self.metrics.removed_sandboxes,
        )
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
        state=CONTAINER_STATES.get(c.state, "unknown"),
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


async def _remove_each(
    ids: Iterable[str], remove: Callable[[str], Awaitable[str]], removed_total: Counter
) -> tuple[set[str], int]:
    """Each id through `remove` ("removed", "gone": someone else removed it, "kept"): the ids
    no longer in the runtime, and how many this round removed (counted in `removed_total`)."""
    gone: set[str] = set()
    removed = 0
    for id_ in ids:
        outcome = await remove(id_)
        if outcome != "kept":
            gone.add(id_)
        if outcome == "removed":
            removed += 1
            removed_total.inc()
    return gone, removed


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
