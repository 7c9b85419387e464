"""Go's AtomicWriter (pkg/volume/util/atomic_writer.go): writes a configMap, secret,
downwardAPI or projected volume so that a reader never sees it half-updated. The volume
manager calls write_payload, in a worker thread, on mount and on every refresh.

Layout: the files live in a hidden ..<UTC timestamp>.<random> directory; ..data is a
symlink to it, replaced by renaming ..data_tmp over it; each top-level name is a symlink
`name -> ..data/name`. Names starting with `..` are the writer's own.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tempfile
import time
from collections.abc import Mapping

from pykubelet.pods.volume_payload import FileProjection

DATA_DIR = "..data"
_NEW_DATA_DIR = "..data_tmp"
_MAX_FILE_NAME = 255
_MAX_PATH = 4096


def write_payload(target_dir: str, payload: Mapping[str, FileProjection]) -> bool:
    """Make target_dir hold exactly payload; True when anything on disk changed.

    Nothing is written when ..data already holds these bytes, modes and owners. Raises
    ValueError, naming the path, for a path Go's validatePath refuses; target_dir must
    exist. Not safe to call concurrently for one directory."""
    files = _validate(payload)
    data_dir = os.path.join(target_dir, DATA_DIR)
    try:
        old_ts = os.readlink(data_dir)
    except FileNotFoundError:
        old_ts = ""

    to_remove: set[str] = set()
    if old_ts:
        old_path = os.path.join(target_dir, old_ts)
        to_remove = _paths_to_remove(files, old_path)
        if not to_remove and not _differs(files, old_path):
            # Up to date; still restore a user-visible link someone removed (Go #121472).
            return _create_user_visible(files, target_dir)

    gids = {p.gid for p in files.values() if p.gid is not None}
    ts_dir = _new_timestamp_dir(target_dir, gids.pop() if len(gids) == 1 else None)
    try:
        _write_files(files, ts_dir)
        new_data_dir = os.path.join(target_dir, _NEW_DATA_DIR)
        # Left behind by a writer killed between symlink and rename; Go would fail on it forever.
        _remove_if_present(new_data_dir)
        os.symlink(os.path.basename(ts_dir), new_data_dir)
        os.rename(new_data_dir, data_dir)  # the atomic step: readers see old or new, whole
    except BaseException:
        shutil.rmtree(ts_dir, ignore_errors=True)
        raise

    _create_user_visible(files, target_dir)
    for name in to_remove:
        if "/" not in name:  # deeper paths went with the old timestamped directory
            _remove_if_present(os.path.join(target_dir, name))
    if old_ts:
        shutil.rmtree(os.path.join(target_dir, old_ts), ignore_errors=True)
    return True


def validate_path(path: str) -> None:
    """Go's validatePath: relative, no `..` element, not starting with `..`, within limits."""
    if path == "":
        raise ValueError("invalid path: must not be empty: ''")
    if posixpath.isabs(path):
        raise ValueError(f"invalid path: must be relative path: {path}")
    if len(path) > _MAX_PATH:
        raise ValueError(f"invalid path: must be less than or equal to {_MAX_PATH} characters: {path[:64]}...")
    elements = path.split("/")
    for element in elements:
        if element == "..":
            raise ValueError(f"invalid path: must not contain '..': {path}")
        if len(element) > _MAX_FILE_NAME:
            raise ValueError(
                f"invalid path: filenames must be less than or equal to {_MAX_FILE_NAME} characters: {path}"
            )
    if elements[0].startswith("..") and len(elements[0]) > 2:
        raise ValueError(f"invalid path: must not start with '..': {path}")


# --- steps ---------------------------------------------------------------------------


def _validate(payload: Mapping[str, FileProjection]) -> dict[str, FileProjection]:
    files: dict[str, FileProjection] = {}
    for path, projection in payload.items():
        validate_path(path)
        files[posixpath.normpath(path)] = projection
    return files


def _paths_to_remove(files: Mapping[str, FileProjection], old_ts_path: str) -> set[str]:
    """Paths under the old timestamped directory that the payload no longer has, neither as
    a file nor as a parent directory of one."""
    old: set[str] = set()
    for root, dirs, names in os.walk(old_ts_path):
        rel = os.path.relpath(root, old_ts_path)
        old.update(posixpath.normpath(posixpath.join(rel, n)) for n in [*dirs, *names])
    new: set[str] = set()
    for path in files:
        while path:
            new.add(path)
            path = posixpath.dirname(path)
    return old - new


def _differs(files: Mapping[str, FileProjection], old_ts_path: str) -> bool:
    """Whether any file's bytes, mode or owner differ from the old directory's. Go compares
    bytes only; a changed mode (defaultMode edited) is rewritten here too."""
    for path, want in files.items():
        full = os.path.join(old_ts_path, path)
        try:
            st = os.lstat(full)
            if not stat.S_ISREG(st.st_mode):
                return True
            with open(full, "rb") as f:
                if f.read() != want.data:
                    return True
        except (FileNotFoundError, NotADirectoryError):
            return True
        if stat.S_IMODE(st.st_mode) != want.mode:
            return True
        if want.uid is not None and st.st_uid != want.uid:
            return True
        if want.gid is not None and st.st_gid != want.gid:
            return True
    return False


def _new_timestamp_dir(target_dir: str, gid: int | None) -> str:
    prefix = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    ts_dir = tempfile.mkdtemp(prefix=prefix, dir=target_dir)
    _own_dir(ts_dir, gid)
    return ts_dir


def _write_files(files: Mapping[str, FileProjection], ts_dir: str) -> None:
    for path, projection in files.items():
        _make_dirs(ts_dir, posixpath.dirname(path), projection.gid)
        # Created 0600 so that a secret is never readable by others before its chmod.
        fd = os.open(os.path.join(ts_dir, path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(projection.data)
            if projection.uid is not None or projection.gid is not None:
                os.fchown(fd, -1 if projection.uid is None else projection.uid,
                          -1 if projection.gid is None else projection.gid)
            os.fchmod(fd, projection.mode)  # explicit: the mode given to open is cut by the umask


def _make_dirs(ts_dir: str, rel_dir: str, gid: int | None) -> None:
    """Create the subdirectories of a nested path 0755 (setgid and group gid under an
    fsGroup, as SetVolumeOwnership leaves a directory)."""
    if not rel_dir:
        return
    current = ts_dir
    for element in rel_dir.split("/"):
        current = os.path.join(current, element)
        try:
            os.mkdir(current)
        except FileExistsError:
            continue
        _own_dir(current, gid)


def _own_dir(path: str, gid: int | None) -> None:
    # Group and others must be able to traverse whatever the umask (Go chmods 0755 too);
    # under an fsGroup, SetVolumeOwnership leaves a directory setgid and in that group.
    if gid is not None:
        os.chown(path, -1, gid)
    os.chmod(path, 0o755 if gid is None else 0o2755)


def _create_user_visible(files: Mapping[str, FileProjection], target_dir: str) -> bool:
    """Create `name -> ..data/name` for each top-level name that has no entry yet."""
    created = False
    for name in {path.split("/", 1)[0] for path in files}:
        link = os.path.join(target_dir, name)
        if not os.path.lexists(link):
            os.symlink(posixpath.join(DATA_DIR, name), link)
            created = True
    return created


def _remove_if_present(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
