"""The one error of the cgroups port: an operation on a cgroup that failed, naming the cgroup,
the file and the fix; the callers of the cgroup manager catch it."""

from __future__ import annotations


class CgroupError(Exception):
    """A cgroup operation that failed; the message names the cgroup, the file and the fix."""

    def __init__(self, path: str, file: str, reason: str, *, errno: int | None = None):
        super().__init__(f"cgroup {path}: {file}: {reason}")
        self.path = path
        self.file = file
        self.reason = reason
        self.errno = errno

