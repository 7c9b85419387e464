"""The cgroup filesystem's reads, writes, mkdirs and rmdirs for the cgroup manager: every
OSError becomes a CgroupError that names the cgroup, the file and the fix."""

from __future__ import annotations

import errno
import os

from pykubelet.ports.node_stats import parse_int

from .errors import CgroupError


def clean(path: str) -> str:
    """The cgroup name made canonical ("/kubepods//burstable/" -> "/kubepods/burstable")."""
    parts = path.split("/")
    if not path.startswith("/") or any(p in (".", "..") for p in parts):
        raise CgroupError(path, path, 'not a cgroup name: give an absolute name such as "/kubepods/burstable"')
    return "/" + "/".join(p for p in parts if p)


def _reason(e: OSError, value: str | None = None) -> str:
    code = e.errno
    if code == errno.ENOENT:
        return ("no such file: the cgroup does not exist (create it first) or its controller is not "
                "enabled for it")
    if code in (errno.EACCES, errno.EPERM):
        return f"{e.strerror}: the kubelet must run as root with the cgroup filesystem mounted read-write"
    if code == errno.EROFS:
        return "the cgroup filesystem is mounted read-only: mount it read-write (a container needs --privileged)"
    if code == errno.EINVAL and value is not None:
        return f"the kernel refused {value!r} (invalid, or beyond what the parent cgroup allows)"
    if code == errno.ENOSPC and value is not None:
        return f"the kernel refused {value!r}: the cgroup's cpuset.cpus or cpuset.mems is empty"
    return e.strerror or str(e)


def read(path: str, file: str) -> str:
    try:
        with open(file, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CgroupError(path, file, _reason(e), errno=e.errno) from e


def read_int(path: str, file: str) -> int:
    value = parse_int(read(path, file))
    if value is None:
        raise CgroupError(path, file, "not a number")
    return value


def write(path: str, file: str, value: str) -> None:
    try:
        # One write(2) of the whole value: the kernel parses each write on its own.
        fd = os.open(file, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise CgroupError(path, file, _reason(e, value), errno=e.errno) from e


def check_shares(path: str, file: str, shares: int) -> None:
    """The kernel clamps cpu.shares silently: read it back, as runc does."""
    got = read_int(path, file)
    if got != shares:
        bound = "maximum" if shares > got else "minimum"
        raise CgroupError(path, file, f"the kernel set {got} for {shares}: the {bound} allowed cpu-shares is {got}")


def mkdir(path: str, folder: str) -> None:
    try:
        os.mkdir(folder, 0o755)
    except FileExistsError:
        pass
    except OSError as e:
        raise CgroupError(path, folder, _reason(e), errno=e.errno) from e


def mkdirs(path: str, mount: str, parts: list[str]) -> None:
    # The last level first: a pod's parents (kubepods, its QoS tier) are there already,
    # and one mkdir a hierarchy is cheaper than one a level.
    try:
        os.mkdir("/".join((mount, *parts)), 0o755)
        return
    except FileExistsError:
        return
    except OSError:
        pass  # a parent is missing (or the mount): level by level, naming what fails
    if not os.path.isdir(mount):
        raise CgroupError(path, mount, "the hierarchy's mount point is gone; is the cgroup filesystem mounted?")
    folder = mount
    for part in parts:
        folder = f"{folder}/{part}"
        mkdir(path, folder)


def remove_tree(folder: str) -> None:
    """rmdir the folder, its child cgroups first when it has any (runc's RemovePath); a
    cgroup folder holds only the kernel's files, which go with it."""
    try:
        os.rmdir(folder)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    try:
        children = [e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return
    for child in children:
        remove_tree(child)
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        pass
