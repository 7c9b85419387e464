"""Linux inotify for trio: wake a task when a directory's entries change.

The file source uses it so that a manifest written into --pod-manifest-path is seen in
milliseconds (the Go kubelet watches the directory too); its stat scan stays as the
safety net for what inotify cannot report (some network filesystems).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import trio

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
# A file's content is complete at close or when renamed in; a half-written file (IN_MODIFY)
# is not worth a look.
_MASK = IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF


class DirectoryWatch:
    def __init__(self, directory: str) -> None:
        self._fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        if _libc.inotify_add_watch(self._fd, os.fsencode(directory), _MASK) < 0:
            error = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(error, f"inotify watch on {directory}: {os.strerror(error)}")

    async def changed(self) -> None:
        """Return once something changed since the last call (events are coalesced)."""
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
