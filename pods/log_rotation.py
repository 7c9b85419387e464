"""Container log rotation decisions (pure): when a log is rotated, the rotated file's name,
which rotated files to compress and which to remove. The log rotation actor
(actors/log_rotation.py) reads the files and the runtime, asks these functions and does it.

Go kubelet equivalent: pkg/kubelet/logs/container_log_manager.go. A container's log
`<n>.log` is rotated to `<n>.log.<YYYYmmdd-HHMMSS>` (local time); older rotated files are
gzipped to `<rotated>.gz` through `<rotated>.tmp`; at most containerLogMaxFiles files exist,
the one being written included.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime

import msgspec

from .labels import (
    CONTAINER_NAME_LABEL,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
    RESTART_COUNT_ANNOTATION,
)

TIMESTAMP_FORMAT = "%Y%m%d-%H%M%S"  # Go's "20060102-150405"
COMPRESS_SUFFIX = ".gz"
TMP_SUFFIX = ".tmp"

# A file that the rotation made of container attempt <n>'s log: <n>.log.<timestamp>, then
# .gz when compressed, .tmp while being compressed (or left by a crash meanwhile).
_ROTATED = re.compile(r"^(?P<restart_count>\d+)\.log\.\d{8}-\d{6}(?:\.gz)?(?:\.tmp)?$")


class RotationPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What to do with one container's log files, in this order (Go's rotateLog):
    remove `remove` (leftovers first, then the oldest rotated files), gzip each of
    `compress`, then rename the log to `rotate_to` and have the runtime reopen it.
    `rotate_to` is None when a file of that name exists already (a second rotation within
    the same second): the rotation waits for the next round rather than lose that file."""

    remove: tuple[str, ...] = ()
    compress: tuple[str, ...] = ()
    rotate_to: str | None = None


def needs_rotation(size: int, max_size: int) -> bool:
    """Go rotates a log of at least containerLogMaxSize bytes; a negative size turns
    rotation off (Go then runs a stub log manager)."""
    return max_size >= 0 and size >= max_size


def rotated_log_name(log_path: str, now: datetime) -> str:
    """`<log>.<timestamp>`, the name the log being written is renamed to (Go's
    rotateLatestLog; `now` in local time, as Go formats time.Now())."""
    return f"{log_path}.{now.strftime(TIMESTAMP_FORMAT)}"


def filter_unused_logs(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """(in use, unused) among a log's rotated files (Go's filterUnusedLogs): a .tmp file is
    a compression that never finished, and an uncompressed file whose .gz exists was
    compressed but not yet removed; both are unused. Order is kept."""
    names = list(names)
    present = set(names)
    in_use: list[str] = []
    unused: list[str] = []
    for name in names:
        if name.endswith(TMP_SUFFIX):
            unused.append(name)
        elif not name.endswith(COMPRESS_SUFFIX) and name + COMPRESS_SUFFIX in present:
            unused.append(name)
        else:
            in_use.append(name)
    return in_use, unused


def plan_rotation(log_path: str, rotated: Iterable[str], *, max_files: int, now: datetime) -> RotationPlan:
    """The rotation of a log that needs it (Go's rotateLog). `rotated` is every file named
    `<log_path>.*`, as full paths.

    Leftovers go first (filter_unused_logs); then, oldest first by name (the timestamps
    sort), the rotated files beyond the max_files - 2 newest, since the log being written
    and the one about to be rotated make max_files; the rest are compressed, so that only
    the newest rotated file stays plain for a reader still finishing it.
    """
    if max_files < 2:
        raise ValueError(f"containerLogMaxFiles {max_files}: must be 2 or more")
    names = list(rotated)
    in_use, unused = filter_unused_logs(names)
    rotate_to: str | None = rotated_log_name(log_path, now)
    if rotate_to in names or rotate_to + COMPRESS_SUFFIX in names:
        rotate_to = None
    keep = max_files - 2 if rotate_to is not None else max_files - 1
    in_use.sort()
    excess = len(in_use) - keep
    removed, kept = (in_use[:excess], in_use[excess:]) if excess > 0 else ([], in_use)
    return RotationPlan(
        remove=(*unused, *removed),
        compress=tuple(name for name in kept if not name.endswith(COMPRESS_SUFFIX)),
        rotate_to=rotate_to,
    )


def logs_to_clean_up(names: Iterable[str], live_restart_counts: set[int] | None) -> list[str]:
    """The files to remove from one container's log directory (`<pod dir>/<container>/`),
    given by name: every rotated file of an attempt no container in the runtime has any
    more (the garbage collector removes a container's rotated files with it, but not when
    something else removed the container), and the unused leftovers of the others.

    `live_restart_counts` holds the restart counts of the containers that exist with this
    directory; None when one of them has an unknown count, so that no attempt counts as
    gone. The logs being written (`<n>.log`) and files the rotation did not make are
    never named.
    """
    by_attempt: dict[int, list[str]] = {}
    for name in names:
        match = _ROTATED.match(name)
        if match:
            by_attempt.setdefault(int(match["restart_count"]), []).append(name)
    remove: list[str] = []
    for restart_count, rotated in sorted(by_attempt.items()):
        if live_restart_counts is not None and restart_count not in live_restart_counts:
            remove += sorted(rotated)
        else:
            remove += sorted(filter_unused_logs(rotated)[1])
    return remove


class LogOwner(msgspec.Struct, frozen=True):
    """Where a container in the runtime writes its log: the pod's log directory name
    (`<namespace>_<name>_<uid>`), the container's name, and its restart count (None when
    it carries no readable restartCount annotation)."""

    pod_dir: str
    container: str
    restart_count: int | None


def log_owner(labels: Mapping[str, str], annotations: Mapping[str, str]) -> LogOwner | None:
    """The log a container writes, from the io.kubernetes.* labels and the restartCount
    annotation the kubelet gives it (runtime_config.pod_log_directory and log_path); None
    for a container without them."""
    parts = [labels.get(key, "") for key in (POD_NAMESPACE_LABEL, POD_NAME_LABEL, POD_UID_LABEL)]
    container = labels.get(CONTAINER_NAME_LABEL, "")
    if not all(parts) or not container:
        return None
    raw = annotations.get(RESTART_COUNT_ANNOTATION, "")
    restart_count = int(raw) if raw.isdigit() else None
    return LogOwner("_".join(parts), container, restart_count)


def live_restart_counts(owners: Iterable[LogOwner]) -> dict[tuple[str, str], set[int] | None]:
    """{(pod dir, container): the restart counts that exist, or None if one is unknown}."""
    live: dict[tuple[str, str], set[int] | None] = {}
    for owner in owners:
        key = (owner.pod_dir, owner.container)
        if owner.restart_count is None:
            live[key] = None
        elif key not in live:
            live[key] = {owner.restart_count}
        elif live[key] is not None:
            live[key].add(owner.restart_count)
    return live

