"""Linux inotify for trio: wake a task when watched files or directories change.

The file source watches --pod-manifest-path (DirectoryWatch) so that a manifest written
there is seen in milliseconds (the Go kubelet watches the directory too); its stat scan
stays as the safety net for what inotify cannot report (some network filesystems). The
container log follower watches a log file and its directory (Inotify).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import trio

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
# A file's content is complete at close or when renamed in; a half-written file (IN_MODIFY)
# is not worth a look.
_MANIFEST_EVENTS = IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF


class Inotify:
    """One inotify instance: watches added and removed by descriptor, and a wait for the
    next change of any (events are coalesced: the caller looks again)."""

    def __init__(self) -> None:
        self._fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_init1: {os.strerror(ctypes.get_errno())}")

    def add(self, path: str, mask: int) -> int:
        wd = _libc.inotify_add_watch(self._fd, os.fsencode(path), mask)
        if wd < 0:
            error = ctypes.get_errno()
            raise OSError(error, f"inotify watch on {path}: {os.strerror(error)}")
        return wd

    def remove(self, wd: int) -> None:
        _libc.inotify_rm_watch(self._fd, wd)  # fails harmlessly when the watch is gone

    async def changed(self) -> None:
        """Return once something changed since the last call."""
        await trio.lowlevel.wait_readable(self._fd)
        while True:
            try:
                if not os.read(self._fd, 65536):
                    return
            except BlockingIOError:
                return

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class DirectoryWatch(Inotify):
    """A manifest directory: entries written, renamed in or out, removed."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        try:
            self.add(directory, _MANIFEST_EVENTS)
        except OSError:
            self.close()
            raise
