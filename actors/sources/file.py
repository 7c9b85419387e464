"""The file source: static pod manifests from --pod-manifest-path (a directory, one pod
per file, or a single file). It sends pod config the source's full set as SourcePods.

inotify on the directory wakes a scan within milliseconds of a manifest being written,
renamed in or removed; a stat scan every scan_interval (device, inode, size, mtime and
ctime of each file) catches what inotify misses and re-reads only the files that changed;
a full re-read every check_frequency (Go's --file-check-frequency) catches anything else.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from dataclasses import dataclass, field
from typing import BinaryIO

import trio

from pykubelet.messages.pod import Pod
from pykubelet.ports.inotify import DirectoryWatch
from pykubelet.messages.pod_updates import ManifestProblem, SourcePods
from pykubelet.pods.manifest import (
    MAX_MANIFEST_BYTES,
    ManifestError,
    check_manifest_size,
    decode_manifests,
    drop_duplicate_pods,
)
from pykubelet.supervisor import ActorContext

log = logging.getLogger("pykubelet.sources.file")

SOURCE = "file"

StatKey = tuple[int, int, int, int, int]


def _stat_key(st: os.stat_result) -> StatKey:
    # ctime too: a chmod that makes an unreadable file readable changes nothing else.
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass
class _Manifest:
    """What one file held when it was last read."""

    key: StatKey | None
    content: bytes | None = None
    pods: list[Pod] = field(default_factory=list)
    problem: ManifestProblem | None = None


def read_bounded(f: BinaryIO, size: int, limit: int) -> bytes:
    """f.read(limit), with a buffer the size of the file (`size`, from its stat) rather than
    of `limit`: a buffered read allocates all it may return first, and glibc keeps the
    1 MiB block, shrunk, as a 4 KiB page of its own for as long as the bytes live (the
    source keeps each manifest's: a page a pod). A file that grew since is read on up to
    the limit."""
    content = f.read(min(size, limit - 1) + 1)
    if len(content) > size:
        content += f.read(limit - len(content))
    return content


def _problem(origin: str, message: str) -> ManifestProblem:
    return ManifestProblem(source=SOURCE, origin=origin, message=message)


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "cannot read: No such file or directory (a dangling symlink?)"
    return f"cannot read: {exc.strerror or exc}"


class ManifestPath:
    """The manifests at one path and what was last read from each file. scan() does the
    blocking file system calls; it is cheap when nothing changed (one stat per file)."""

    def __init__(self, path: str, *, node_name: str) -> None:
        self.path = path.rstrip(os.sep) or os.sep
        self.node_name = node_name
        self._files: dict[str, _Manifest] = {}
        self._path_problem: ManifestProblem | None = None
        self._missing_logged = False
        self._ignored_logged: set[str] = set()

    # -- reading -----------------------------------------------------------------

    def scan(self, *, full: bool) -> bool:
        """Look at the path again; re-read the files whose stat changed (all of them when
        full). True when a file appeared, went away or was re-read."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if not self._missing_logged:
                log.info("manifest path does not exist (yet); watching for it", extra={"path": self.path})
                self._missing_logged = True
            return self._replace({}, None)
        except OSError as exc:
            return self._replace({}, _problem(self.path, _os_reason(exc)))
        self._missing_logged = False
        if stat.S_ISDIR(st.st_mode):
            try:
                names = sorted(n for n in os.listdir(self.path) if not n.startswith("."))
            except OSError as exc:
                return self._replace({}, _problem(self.path, _os_reason(exc)))
            files = {}
            for name in names:
                manifest = self._look_at(os.path.join(self.path, name), full=full)
                if manifest is not None:
                    files[os.path.join(self.path, name)] = manifest
            return self._replace(files, None)
        if stat.S_ISREG(st.st_mode):
            return self._replace({self.path: self._look_at(self.path, full=full, st=st)}, None)
        return self._replace({}, _problem(self.path, "not a directory or a regular file"))

    def _replace(self, files: dict[str, _Manifest], path_problem: ManifestProblem | None) -> bool:
        changed = files.keys() != self._files.keys() or path_problem != self._path_problem
        changed = changed or any(files[p] is not self._files[p] for p in files)
        self._files, self._path_problem = files, path_problem
        return changed

    def _look_at(self, path: str, *, full: bool, st: os.stat_result | None = None) -> _Manifest | None:
        """The file's manifest: the previous one when its stat is unchanged (and not full),
        else re-read. None for what the Go kubelet skips: sub-directories (and a file
        removed since the directory was listed)."""
        previous = self._files.get(path)
        try:
            st = st or os.stat(path)
        except FileNotFoundError as exc:
            if not os.path.lexists(path):
                return None  # removed since the directory was listed
            return self._unreadable(path, previous, None, _os_reason(exc))
        except OSError as exc:
            return self._unreadable(path, previous, None, _os_reason(exc))
        if stat.S_ISDIR(st.st_mode):
            if path not in self._ignored_logged:
                log.info("not recursing into a sub-directory of the manifest path", extra={"path": path})
                self._ignored_logged.add(path)
            return None
        key = _stat_key(st)
        if previous is not None and previous.key == key and not full:
            return previous
        if not stat.S_ISREG(st.st_mode):
            return self._unreadable(path, previous, key, "not a regular file")
        try:
            check_manifest_size(st.st_size, origin=path)
            with open(path, "rb") as f:
                content = read_bounded(f, st.st_size, MAX_MANIFEST_BYTES + 1)
        except ManifestError as exc:
            return self._unreadable(path, previous, key, exc.message)
        except OSError as exc:
            return self._unreadable(path, previous, key, _os_reason(exc))
        if previous is not None and previous.content == content:
            previous.key = key  # touched or re-read, same bytes: nothing to decode
            return previous
        try:
            pods = decode_manifests(content, origin=path, source=SOURCE, node_name=self.node_name)
        except ManifestError as exc:
            return _Manifest(key=key, content=content, problem=exc.problem(SOURCE))
        return _Manifest(key=key, content=content, pods=pods)

    def _unreadable(self, path: str, previous: _Manifest | None, key: StatKey | None, reason: str) -> _Manifest:
        problem = _problem(path, reason)
        if previous is not None and previous.problem == problem and previous.content is None:
            previous.key = key
            return previous
        return _Manifest(key=key, problem=problem)

    # -- the source's full set ---------------------------------------------------

    def source_pods(self) -> SourcePods:
        """Every pod (the first of each name, by file name) and every problem."""
        pods, problems = drop_duplicate_pods(
            [(path, pod) for path, manifest in self._files.items() for pod in manifest.pods], source=SOURCE
        )
        problems = [m.problem for m in self._files.values() if m.problem is not None] + problems
        if self._path_problem is not None:
            problems.insert(0, self._path_problem)
        return SourcePods(source=SOURCE, pods=pods, problems=problems)


def file_source_actor(
    path: str,
    *,
    node_name: str,
    check_frequency: float,
    send_to: str = "root/pod-config",
    scan_interval: float = 1.0,
):
    """The actor function of the file source for one --pod-manifest-path.

    Sends the full set at start, whenever the set changes and after every full re-read.
    The mailbox at send_to (pod config) must exist before this actor starts.
    """
    if check_frequency <= 0 or scan_interval <= 0:
        raise ValueError("check_frequency and scan_interval must be positive")

    async def run(ctx: ActorContext) -> None:
        pod_config = ctx.registry.lookup(send_to)
        manifests = ManifestPath(path, node_name=node_name)
        logged: set[ManifestProblem] = set()
        last_sent: SourcePods | None = None
        next_full = trio.current_time()
        log.info("watching manifest path", extra={"path": manifests.path})
        watch: DirectoryWatch | None = None
        try:
            while True:
                full = trio.current_time() >= next_full
                if full:
                    next_full = trio.current_time() + check_frequency
                    if watch is None:
                        watch = _watch(manifests.path)  # again at each full re-read until it works
                changed = manifests.scan(full=full)
                if full or changed or last_sent is None:
                    update = manifests.source_pods()
                    logged = _log_new_problems(update.problems, logged)
                    if full or update != last_sent:
                        await pod_config.send(update)
                        last_sent = update
                with trio.move_on_after(min(scan_interval, max(0.0, next_full - trio.current_time()))):
                    if watch is not None:
                        await watch.changed()
                    else:
                        await trio.sleep_forever()
        finally:
            if watch is not None:
                watch.close()

    return run


def _watch(path: str) -> DirectoryWatch | None:
    """An inotify watch on the manifest directory (the parent of a single manifest file);
    None if it cannot be had (missing directory, no inotify): the stat scan still works."""
    directory = path if os.path.isdir(path) else os.path.dirname(path) or "."
    try:
        return DirectoryWatch(directory)
    except OSError as exc:
        log.info("no inotify watch on %s (%s): relying on the stat scan", directory, exc.strerror or exc)
        return None


def _log_new_problems(problems: list[ManifestProblem], logged: set[ManifestProblem]) -> set[ManifestProblem]:
    """Log each problem once, when it appears; forget the ones that went away."""
    current = set(problems)
    for problem in problems:
        if problem not in logged:
            log.warning("manifest %s: %s", problem.origin, problem.message, extra={"path": problem.origin})
    for problem in logged - current:
        if not any(p.origin == problem.origin for p in current):
            log.info("manifest %s: problem resolved", problem.origin, extra={"path": problem.origin})
    return current
