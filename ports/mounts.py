"""Mounts of the node's filesystem the volume manager makes: tmpfs for secrets, tokens and
memory-backed emptyDirs (so that they never touch the disk), and their removal. Thin calls
into libc's mount(2)/umount2(2); the kubelet runs as root."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_MNT_DETACH = 2


class MountError(OSError):
    """A mount or unmount that failed; str() names the path and the reason."""


def is_mount_point(path: str) -> bool:
    return os.path.ismount(path)


def mount_tmpfs(path: str, *, size_bytes: int | None = None, mode: int = 0o755) -> None:
    """Mount a fresh tmpfs at `path` (which must exist), unless one is there already (a
    restarted kubelet keeps the mounts of running pods)."""
    if is_mount_point(path):
        return
    options = f"mode={mode:o}" + (f",size={size_bytes}" if size_bytes else "")
    if _libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", 0, options.encode()) != 0:
        errno = ctypes.get_errno()
        raise MountError(errno, f"mount tmpfs at {path}: {os.strerror(errno)}")


def unmount(path: str) -> None:
    """Unmount `path` if it is a mount point (lazily: a process still inside it keeps what it
    holds, the name is gone at once)."""
    if not is_mount_point(path):
        return
    if _libc.umount2(os.fsencode(path), _MNT_DETACH) != 0:
        errno = ctypes.get_errno()
        raise MountError(errno, f"unmount {path}: {os.strerror(errno)}")
