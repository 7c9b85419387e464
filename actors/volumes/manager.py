"""Sets up a pod's volumes before its containers start, refreshes them at every sync, and
removes them with the pod (Go: the volume manager's reconciler and volume plugins). Pod
workers call it; the files come from pods/volume_payload.py and are written by
ports/atomic_writer.py, secrets and tokens on tmpfs.

Layout, as the Go kubelet's: <root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import threading
from collections.abc import Mapping

import trio

from pykubelet.messages.pod import UNSUPPORTED_VOLUME_TYPES, Pod, Volume
from pykubelet.pods.downward_api import DownwardApiError, PodFacts
from pykubelet.pods.resources import parse_quantity
from pykubelet.pods.volume_payload import (
    FileProjection,
    VolumePayloadError,
    config_map_payload,
    downward_api_payload,
    projected_payload,
    secret_payload,
)
from pykubelet.ports import mounts
from pykubelet.ports.atomic_writer import write_payload
from pykubelet.supervisor.verbosity import V

from .object_cache import EMPTY_SNAPSHOT, ObjectSnapshot
from .tokens import TokenError, TokenManager

log = logging.getLogger("pykubelet.volumes")

PLUGINS = {
    "emptyDir": "kubernetes.io~empty-dir",
    "configMap": "kubernetes.io~configmap",
    "secret": "kubernetes.io~secret",
    "downwardAPI": "kubernetes.io~downward-api",
    "projected": "kubernetes.io~projected",
}
DEFAULT_MODE = 0o644


class MountFailed(Exception):
    """A volume that could not be set up; str() is the FailedMount event's message."""

    def __init__(self, volume: str, message: str) -> None:
        super().__init__(f'MountVolume.SetUp failed for volume "{volume}" : {message}')
        self.volume = volume


def host_path_error(path: str, type_: str, st: os.stat_result | None) -> str | None:
    """Go's hostPath type checks: what is at `path` (st None: nothing) against `type_`.
    The *OrCreate types are checked after the kubelet created what was missing."""
    if not type_:
        return None
    expected = {
        "Directory": (stat.S_ISDIR, "a directory"), "DirectoryOrCreate": (stat.S_ISDIR, "a directory"),
        "File": (stat.S_ISREG, "a file"), "FileOrCreate": (stat.S_ISREG, "a file"),
        "Socket": (stat.S_ISSOCK, "a socket file"), "CharDevice": (stat.S_ISCHR, "a character device"),
        "BlockDevice": (stat.S_ISBLK, "a block device"),
    }
    if type_ not in expected:
        return f"hostPath type {type_!r} is not one of {', '.join(sorted(expected))}"
    check, what = expected[type_]
    if st is None:
        return f"hostPath type check failed: {path} does not exist"
    if not check(st.st_mode):
        return f"hostPath type check failed: {path} is not {what}"
    return None


class VolumeManager:
    def __init__(self, root_dir: str, *, tokens: TokenManager | None = None) -> None:
        self.root_dir = root_dir
        self.tokens = tokens

    def pod_dir(self, uid: str) -> str:
        return os.path.join(self.root_dir, "pods", uid)

    def volume_dir(self, uid: str, type_: str, name: str) -> str:
        return os.path.join(self.pod_dir(uid), "volumes", PLUGINS[type_], name)

    async def set_up(self, pod: Pod, facts: PodFacts, objects: ObjectSnapshot = EMPTY_SNAPSHOT) -> dict[str, str]:
        """Every volume of the pod ready on the node: volume name -> its host path. Raises
        MountFailed for the first volume that cannot be set up; the others are set up all
        the same, so a retry has less to do."""
        paths: dict[str, str] = {}
        failed: MountFailed | None = None
        for volume in pod.spec.volumes:
            try:
                paths[volume.name] = await self._set_up(pod, volume, facts, objects)
            except MountFailed as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
        return paths

    async def _set_up(self, pod: Pod, volume: Volume, facts: PodFacts, objects: ObjectSnapshot) -> str:
        type_ = volume.type
        if volume.host_path is not None:
            return await trio.to_thread.run_sync(_host_path, volume.name, volume.host_path.path, volume.host_path.type)
        if type_ not in PLUGINS:
            reason = "is not supported by pykubelet" if type_ in UNSUPPORTED_VOLUME_TYPES else "is not known"
            raise MountFailed(volume.name, f"volume type {type_ or '(none)'} {reason}")
        path = self.volume_dir(pod.metadata.uid, type_, volume.name)
        fs_group = pod.spec.security_context.fs_group if pod.spec.security_context is not None else None
        payload = await self._payload(pod, volume, facts, objects, fs_group)
        empty_dir = volume.empty_dir
        if empty_dir is not None and empty_dir.medium not in ("", "Memory"):
            raise MountFailed(volume.name, f"emptyDir medium {empty_dir.medium!r} is not supported by pykubelet "
                                           "(\"\" for disk, Memory for tmpfs)")
        tmpfs = type_ in ("secret", "projected") or (empty_dir is not None and empty_dir.medium == "Memory")
        size = None
        if empty_dir is not None and empty_dir.medium == "Memory" and empty_dir.size_limit:
            try:
                size = int(parse_quantity(empty_dir.size_limit))
            except ValueError as exc:
                raise MountFailed(volume.name, f"emptyDir sizeLimit {empty_dir.size_limit!r}: {exc}") from exc

        # An emptyDir is open to every user of the pod (Go makes it 0777); the kubelet's
        # own files are readable by all and written by it only.
        mode = 0o777 if type_ == "emptyDir" else 0o755

        def write() -> bool:
            # The volume's root is made once (a container may change its mode later, as in
            # Go); the kubelet's files in it are rewritten whenever they change.
            new = not os.path.exists(path)
            os.makedirs(path, exist_ok=True)
            if tmpfs and not mounts.is_mount_point(path):
                mounts.mount_tmpfs(path, size_bytes=size, mode=mode)
                new = True
            if new:
                os.chmod(path, mode)
                if fs_group is not None:
                    _own_for_group(path, fs_group)
            return payload is not None and write_payload(path, payload)

        try:
            if await trio.to_thread.run_sync(write):
                log.log(V(2), "volume updated", extra={"pod": pod.full_name, "volume": volume.name})
        except (OSError, ValueError) as exc:
            raise MountFailed(volume.name, str(exc)) from exc
        return path

    async def _payload(
        self, pod: Pod, volume: Volume, facts: PodFacts, objects: ObjectSnapshot, fs_group: int | None
    ) -> dict[str, FileProjection] | None:
        namespace = pod.metadata.namespace
        try:
            if volume.config_map is not None:
                mode = volume.config_map.default_mode
                return config_map_payload(volume.config_map, namespace, objects,
                                          default_mode=DEFAULT_MODE if mode is None else mode, fs_group=fs_group)
            if volume.secret is not None:
                mode = volume.secret.default_mode
                return secret_payload(volume.secret, namespace, objects,
                                      default_mode=DEFAULT_MODE if mode is None else mode, fs_group=fs_group)
            if volume.downward_api is not None:
                mode = volume.downward_api.default_mode
                return downward_api_payload(volume.downward_api.items, pod, facts,
                                            default_mode=DEFAULT_MODE if mode is None else mode, fs_group=fs_group)
            if volume.projected is not None:
                tokens = await self._tokens(pod, volume)
                return projected_payload(volume.projected, pod, facts, objects, tokens, fs_group=fs_group)
        except (VolumePayloadError, DownwardApiError) as exc:
            raise MountFailed(volume.name, str(exc)) from exc
        return None  # emptyDir: no files of the kubelet's

    async def _tokens(self, pod: Pod, volume: Volume) -> Mapping[int, bytes]:
        tokens: dict[int, bytes] = {}
        for index, source in enumerate(volume.projected.sources):
            if source.service_account_token is None:
                continue
            if self.tokens is None:
                raise MountFailed(volume.name, "a service account token needs the API server (no --kubeconfig)")
            try:
                tokens[index] = await self.tokens.token(pod, source.service_account_token)
            except TokenError as exc:
                raise MountFailed(volume.name, f"failed to fetch token: {exc}") from exc
        return tokens

    async def tear_down(self, uid: str) -> None:
        """Unmount and remove everything the pod had on the node (its containers are gone).
        Never raises: what cannot be removed is logged and left for the next try."""
        if self.tokens is not None:
            self.tokens.forget(uid)
        await remove_in_background(self.pod_dir(uid))

    async def tear_down_volumes(self, uid: str) -> None:
        """Only the volumes (a finished pod keeps its termination messages until removed)."""
        if self.tokens is not None:
            self.tokens.forget(uid)
        await remove_in_background(os.path.join(self.pod_dir(uid), "volumes"))

    def pods_on_disk(self) -> set[str]:
        try:
            return set(os.listdir(os.path.join(self.root_dir, "pods")))
        except FileNotFoundError:
            return set()


def _host_path(name: str, path: str, type_: str) -> str:
    try:
        if type_ == "DirectoryOrCreate" and not os.path.exists(path):
            os.makedirs(path, mode=0o755)
        elif type_ == "FileOrCreate" and not os.path.exists(path):
            # Go creates the file, not its parent directory.
            with open(path, "a"):
                pass
            os.chmod(path, 0o644)
        st = os.stat(path) if os.path.exists(path) else None
    except OSError as exc:
        raise MountFailed(name, f"hostPath {path}: {exc.strerror}") from exc
    if (error := host_path_error(path, type_, st)) is not None:
        raise MountFailed(name, error)
    return path


def _own_for_group(path: str, gid: int) -> None:
    """fsGroup: the volume's root belongs to the group, group-writable and setgid, so that
    what the containers create there belongs to the group too (Go: SetVolumeOwnership)."""
    st = os.stat(path)
    if st.st_gid != gid:
        os.chown(path, -1, gid)
    mode = stat.S_IMODE(st.st_mode) | stat.S_ISGID | stat.S_IRWXG
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode)


class _Removals:
    """The directories a worker thread is removing now, each with the event its end sets.
    A removal outlives the actor that asked for it when that actor is cancelled (its thread
    cannot be); a second request for the same directory meanwhile waits for that one
    instead of removing beside it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, threading.Event] = {}

    def start(self, path: str) -> threading.Event | None:
        """None: the caller removes `path` now, and calls done(path) after; otherwise the
        end of the removal already under way, to wait for."""
        with self._lock:
            running = self._running.get(path)
            if running is None:
                self._running[path] = threading.Event()
            return running

    def done(self, path: str) -> None:
        with self._lock:
            self._running.pop(path).set()

    def __contains__(self, path: str) -> bool:
        with self._lock:
            return path in self._running


REMOVALS = _Removals()


async def remove_in_background(path: str) -> None:
    """Unmounts and removes `path` in a worker thread. Cancelling the caller does not wait
    for the disk (a slow unmount or rmtree would hold up its supervisor's restarts): the
    thread goes on alone. A removal of the same path asked meanwhile waits for the one
    under way; what that one could not remove, the next garbage collection round finds."""

    def remove() -> None:
        # Claimed in the thread: a caller cancelled before its thread started claims nothing.
        running = REMOVALS.start(path)
        if running is not None:
            running.wait()
            return
        try:
            _remove_dir(path)
        finally:
            REMOVALS.done(path)

    await trio.to_thread.run_sync(remove, abandon_on_cancel=True)


def _remove_dir(path: str) -> None:
    """Unmount what the kubelet mounted below `path`, then remove it, never through a mount
    that is still there (a container's Bidirectional mount, an unmount that failed): then
    it is left in place with a warning, as Go's cleanup of orphaned pod directories does."""
    if not os.path.lexists(path):
        return
    for point in sorted(_mounts_below(path), key=len, reverse=True):
        try:
            mounts.unmount(point)
        except OSError as exc:
            log.warning("cannot unmount %s: %s", point, exc)
    if remaining := _mounts_below(path):
        log.warning("not removing %s: mounts remain below it: %s", path, ", ".join(remaining))
        return
    shutil.rmtree(path, onerror=_removal_failed)


def _removal_failed(function, path: str, exc_info) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):  # gone meanwhile is fine
        log.warning("removing %s: %s", path, exc_info[1])


def _mounts_below(path: str) -> list[str]:
    prefix = os.path.realpath(path) + "/"
    try:
        with open("/proc/self/mountinfo") as file:
            points = [line.split()[4].replace("\\040", " ") for line in file]
    except OSError:
        return []
    return [p for p in points if p.startswith(prefix)]
