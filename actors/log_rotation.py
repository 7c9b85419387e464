"""Container log rotation (Go's container log manager): every containerLogMonitorInterval,
each running managed container's log that reached containerLogMaxSize is renamed, the
runtime reopens it (CRI ReopenContainerLog), older rotated files are gzipped and the
oldest removed, so that at most containerLogMaxFiles files exist per container.

It lists the runtime over CRI and the files under podLogsDir, asks the pure decisions in
pods/log_rotation.py and does the renames, removals and compressions (these in a worker
thread). Its only state is the files (a restarted incarnation carries on from them) and
each running container's log path, read once with ContainerStatus (a container's log path
never changes): a status call per container each round cost 500 CRI calls every 10 s at
500 pods, the daemon's largest steady cost.
"""

from __future__ import annotations

import glob
import gzip
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

import trio
from prometheus_client import CollectorRegistry, Counter

from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.messages.cri_api import api_pb2
from pykubelet.pods.labels import CONTAINER_NAME_LABEL, MANAGED_LABEL, MANAGED_VALUE, POD_UID_LABEL
from pykubelet.pods.log_rotation import (
    COMPRESS_SUFFIX,
    TMP_SUFFIX,
    live_restart_counts,
    log_owner,
    logs_to_clean_up,
    needs_rotation,
    plan_rotation,
)
from pykubelet.ports.cri import CriError, CriNotFound
from pykubelet.supervisor import ActorContext
from pykubelet.supervisor.verbosity import V

log = logging.getLogger("pykubelet.log_rotation")

_RUNNING_MANAGED = api_pb2.ContainerFilter(
    state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING),
    label_selector={MANAGED_LABEL: MANAGED_VALUE},
)
_CHUNK = 1 << 20  # bytes compressed between two looks at cancellation
_GZIP_LEVEL = 6  # Go's gzip.DefaultCompression


@dataclass(frozen=True)
class LogRotationSettings:
    """Go kubelet defaults: containerLogMaxSize 10Mi, containerLogMaxFiles 5,
    containerLogMonitorInterval 10s, containerLogMaxWorkers 1."""

    max_size: int = 10 * 1024 * 1024  # bytes; negative: no rotation (Go's stub log manager)
    max_files: int = 5  # the log being written included
    monitor_interval: float = 10.0
    max_workers: int = 1  # containers handled at the same time

    def __post_init__(self) -> None:
        if self.max_files < 2:
            raise ValueError(f"containerLogMaxFiles {self.max_files}: must be 2 or more")
        if self.max_workers < 1:
            raise ValueError(f"containerLogMaxWorkers {self.max_workers}: must be 1 or more")
        if self.monitor_interval <= 0:
            raise ValueError(f"containerLogMonitorInterval {self.monitor_interval}s: must be positive")


class LogRotationMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.rotations = Counter(
            "pykubelet_container_log_rotations_total", "Container logs rotated.", registry=registry,
        )
        self.errors = Counter(
            "pykubelet_container_log_rotation_errors_total",
            "Containers whose log could not be checked or rotated in a round.", registry=registry,
        )


def log_rotation_actor(
    settings: LogRotationSettings,
    *,
    runtime: RuntimeHandle,
    metrics: LogRotationMetrics,
    pod_logs_dir: str,
    wall_clock: Callable[[], float] = time.time,
    compress: Callable[[str], Awaitable[None]] | None = None,
):
    """`wall_clock` names the rotated files (Unix time, shown in local time as Go does);
    the interval runs on trio's clock. `compress`: how a rotated file is gzipped
    (compress_in_thread)."""

    async def run(ctx: ActorContext) -> None:
        if settings.max_size < 0:
            log.info("container log rotation disabled (containerLogMaxSize is negative)")
            await trio.sleep_forever()
        rotator = LogRotator(settings, runtime=runtime, metrics=metrics, pod_logs_dir=pod_logs_dir,
                             wall_clock=wall_clock, compress=compress)  # fmt: skip
        problem: str | None = None
        while True:
            await runtime.wait_connected()
            started = trio.current_time()
            try:
                await rotator.rotate_logs()
            except CriError as exc:
                if str(exc) != problem:  # one line per new problem, not one per round
                    log.warning("container log rotation failed: %s", exc)
                    problem = str(exc)
            else:
                problem = None
            await trio.sleep_until(started + settings.monitor_interval)

    return run


class LogRotator:
    """One round at a time (`rotate_logs`); remembers only which problems it has logged."""

    def __init__(
        self,
        settings: LogRotationSettings,
        *,
        runtime: RuntimeHandle,
        metrics: LogRotationMetrics,
        pod_logs_dir: str,
        wall_clock: Callable[[], float] = time.time,
        compress: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.metrics = metrics
        self.pod_logs_dir = pod_logs_dir
        self.wall_clock = wall_clock
        self.compress = compress or compress_in_thread
        self._problems: dict[str, str] = {}  # container id -> the error last logged for it
        self._cleanup_problems: set[str] = set()  # paths that could not be removed
        self._log_paths: dict[str, str] = {}  # container id -> its log path, while it runs

    async def rotate_logs(self) -> None:
        """One round (Go's rotateLogs and its workers): clean up what earlier rotations
        left, then check every running managed container's log, max_workers at a time."""
        cri = self.runtime.client
        owners = [log_owner(c.labels, c.annotations) for c in await cri.list_containers()]
        live = live_restart_counts(owner for owner in owners if owner is not None)
        removed, failures = clean_up_logs(self.pod_logs_dir, live)
        if removed:
            log.info("removed %d leftover or orphaned rotated log files", removed)
        for path, error in failures:
            if path not in self._cleanup_problems:
                log.warning("cannot clean up container log file %s: %s", path, error)
        self._cleanup_problems = {path for path, _ in failures}

        running = await cri.list_containers(_RUNNING_MANAGED)
        queue = iter(running)

        async def worker() -> None:
            for container in queue:  # shared by the workers, as Go's work queue
                await self._process_container(container)

        async with trio.open_nursery() as nursery:
            for _ in range(min(self.settings.max_workers, len(running))):
                nursery.start_soon(worker)
        ids = {c.id for c in running}
        self._problems = {cid: problem for cid, problem in self._problems.items() if cid in ids}
        self._log_paths = {cid: path for cid, path in self._log_paths.items() if cid in ids}

    async def _process_container(self, container: api_pb2.Container) -> None:
        fields = {
            "pod_uid": container.labels.get(POD_UID_LABEL, ""),
            "container": container.labels.get(CONTAINER_NAME_LABEL, container.metadata.name),
            "container_id": container.id,
        }
        try:
            rotated = await self._rotate_if_needed(container.id)
        except CriNotFound:  # gone since the listing: nothing left to rotate
            self._problems.pop(container.id, None)
            return
        except (CriError, OSError) as exc:  # this container's; the others go on
            self.metrics.errors.inc()
            if self._problems.get(container.id) != str(exc):
                log.warning("cannot rotate the log of container %s: %s", container.id, exc, extra=fields)
                self._problems[container.id] = str(exc)
            return
        self._problems.pop(container.id, None)
        if rotated is not None:
            self.metrics.rotations.inc()
            log.log(V(4), "rotated container log to %s", rotated, extra=fields)

    async def _rotate_if_needed(self, container_id: str) -> str | None:
        """The rotated file's name, or None when the log was left as it was."""
        cri, settings = self.runtime.client, self.settings
        path = self._log_paths.get(container_id)
        if path is None:
            path = self._log_paths[container_id] = (await cri.container_status(container_id)).status.log_path
        if not path:
            return None
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            # Go: a missing log (a rotation cut short, or removed by hand) is reopened.
            await cri.reopen_container_log(container_id)
            size = os.stat(path).st_size
        if not needs_rotation(size, settings.max_size):
            return None
        plan = plan_rotation(
            path, glob.glob(glob.escape(path) + ".*"), max_files=settings.max_files,
            now=datetime.fromtimestamp(self.wall_clock()),
        )
        for name in plan.remove:
            _remove(name)
        for name in plan.compress:
            await self.compress(name)
        if plan.rotate_to is None:
            return None
        os.rename(path, plan.rotate_to)
        try:
            await cri.reopen_container_log(container_id)
        except CriError:
            # As Go: put the log back, to be rotated next round.
            try:
                os.rename(plan.rotate_to, path)
            except OSError as exc:
                log.error("cannot rename rotated log %s back to %s: %s", plan.rotate_to, path, exc)
            raise
        return plan.rotate_to


async def compress_in_thread(path: str) -> None:
    """compress_log in a worker thread, so that the event loop goes on meanwhile. A
    cancelled caller waits for the thread only up to the end of the chunk in hand."""
    await trio.to_thread.run_sync(compress_log, path, trio.from_thread.check_cancelled)


def compress_log(path: str, check_cancelled: Callable[[], None] = lambda: None) -> None:
    """gzip `path` into `path.gz` through `path.tmp`, then remove `path` (Go's compressLog).
    For a worker thread: `check_cancelled` (trio.from_thread.check_cancelled) is called
    between chunks, and whatever it raises leaves no .tmp behind."""
    tmp = path + TMP_SUFFIX
    mode = os.stat(path).st_mode & 0o777
    try:
        with open(path, "rb") as source, open(tmp, "wb", opener=_opener(mode)) as raw:
            # No name in the header (as Go's gzip writer): it would be the .tmp one.
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=_GZIP_LEVEL) as target:
                while chunk := source.read(_CHUNK):
                    target.write(chunk)
                    check_cancelled()
        os.rename(tmp, path + COMPRESS_SUFFIX)
    finally:
        _remove(tmp)
    os.remove(path)


def clean_up_logs(
    pod_logs_dir: str, live: dict[tuple[str, str], set[int] | None]
) -> tuple[int, list[tuple[str, OSError]]]:
    """Remove what pods/log_rotation.logs_to_clean_up names in every container log
    directory (`<podLogsDir>/<pod dir>/<container>/`); returns how many files went and
    the ones that could not be removed (or directories not read)."""
    removed = 0
    failures: list[tuple[str, OSError]] = []

    def directories(path: str) -> list[os.DirEntry]:
        try:
            return [entry for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False)]
        except FileNotFoundError:  # removed meanwhile (the garbage collector)
            return []
        except OSError as exc:
            failures.append((path, exc))
            return []

    for pod_dir in directories(pod_logs_dir):
        for container_dir in directories(pod_dir.path):
            try:
                names = os.listdir(container_dir.path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                failures.append((container_dir.path, exc))
                continue
            for name in logs_to_clean_up(names, live.get((pod_dir.name, container_dir.name), set())):
                path = os.path.join(container_dir.path, name)
                try:
                    os.remove(path)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    failures.append((path, exc))
                    continue
                removed += 1
    return removed, failures


def _opener(mode: int) -> Callable[[str, int], int]:
    """open()'s opener creating the file with `mode` (the log's own, as Go's compressLog)."""
    return lambda file, flags: os.open(file, flags, mode)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
