"""Host processes as containers: start one in a session of its own, tell it apart from a
later process that got the same pid, signal its process group, wait for its exit, and run
ExecSync commands beside it.

A container's stdout and stderr are FIFOs under <root>/embedded-runtime/io/<id>/ that the
container holds open read-write: it never gets SIGPIPE when the runtime process dies, and a
restarted runtime re-opens the FIFOs and goes on reading what the container writes (while
no runtime reads, the container blocks once a pipe buffer, 64 KiB, is full).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# The PATH a container gets unless its env sets one (containerd's default for images
# without one; here there is no image).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ADOPTED_POLL_SECONDS = 0.2  # how often the exit of an adopted process is looked for
EXEC_OUTPUT_CAP = 16 * 1024 * 1024  # per stream, as containerd's ExecSync
EXEC_DRAIN_SECONDS = 1.0  # after the exec exits, how long its output may still trickle in
GROUP_EXIT_SECONDS = 1.0  # how long a killed process group may take to be gone


@dataclass(frozen=True)
class ProcessIdentity:
    """A pid plus the process's start time (clock ticks after boot, /proc/<pid>/stat field
    22): together they name one process, even after the pid is reused."""

    pid: int
    start_time: int


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, from field 3 (state) on."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            raw = file.read().decode(errors="replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def identify(pid: int) -> ProcessIdentity | None:
    fields = _proc_stat(pid)
    if fields is None:
        return None
    return ProcessIdentity(pid, int(fields[19]))


def is_running(identity: ProcessIdentity) -> bool:
    """True while the process lives (a zombie has exited: nobody reaped it yet)."""
    fields = _proc_stat(identity.pid)
    return fields is not None and fields[0] not in ("Z", "X") and int(fields[19]) == identity.start_time


def signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def kill_group_leftovers(identity: ProcessIdentity) -> None:
    """SIGKILL what is left of an exited container's process group, as the kernel ends a PID
    namespace with its init. Safe while the leader is a zombie (its pid, and so the group id,
    cannot be reused); once it is gone, only members started after the leader are killed."""
    fields = _proc_stat(identity.pid)
    if fields is not None and int(fields[19]) == identity.start_time:
        signal_group(identity.pid, signal.SIGKILL)
        return
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        member = _proc_stat(int(entry.name))
        if member is None:
            continue
        in_group, younger = int(member[2]) == identity.pid, int(member[19]) >= identity.start_time
        if in_group and younger:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def live_group_members(pgid: int) -> list[int]:
    """The pids in process group `pgid` that have not exited (zombies do not count)."""
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields is not None and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


async def end_group(identity: ProcessIdentity, timeout: float = GROUP_EXIT_SECONDS) -> None:
    """Kill what is left of an exited container's process group and wait (up to `timeout`)
    until it is gone: when a container's init exits, the kernel ends every process of its
    PID namespace before the exit is reported, and the kubelet may rely on that."""
    kill_group_leftovers(identity)
    deadline = asyncio.get_running_loop().time() + timeout
    while live_group_members(identity.pid) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)


def container_environment(envs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The container's env: a minimal PATH, HOME and HOSTNAME (the host's: there is no UTS
    namespace), overridden by the config's envs. Nothing of the runtime's own env leaks in."""
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        home = "/"
    environment = {"PATH": DEFAULT_PATH, "HOME": home, "HOSTNAME": os.uname().nodename}
    environment.update(envs)
    return environment


# -- a container's pipes ------------------------------------------------------------------


class ContainerPipes:
    """The FIFOs of one container's stdout and stderr, in `directory`."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.stdout = self.directory / "stdout"
        self.stderr = self.directory / "stderr"

    def create(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for fifo in (self.stdout, self.stderr):
            fifo.unlink(missing_ok=True)
            os.mkfifo(fifo, 0o600)

    def open_readers(self) -> tuple[int, int]:
        """Non-blocking read ends (opening one never waits for a writer)."""
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
        stdout = os.open(self.stdout, flags)
        try:
            return stdout, os.open(self.stderr, flags)
        except BaseException:
            os.close(stdout)
            raise

    def open_writers(self) -> tuple[int, int]:
        """The container's ends, read-write so that a FIFO always has a reader."""
        stdout = os.open(self.stdout, os.O_RDWR | os.O_CLOEXEC)
        try:
            return stdout, os.open(self.stderr, os.O_RDWR | os.O_CLOEXEC)
        except BaseException:
            os.close(stdout)
            raise

    def exist(self) -> bool:
        return self.stdout.exists() and self.stderr.exists()

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


# -- starting and waiting -------------------------------------------------------------------


def start_process(
    argv: Sequence[str], env: Mapping[str, str], cwd: str, stdout: int, stderr: int
) -> subprocess.Popen:
    """Start argv in a new session (its pid is its process group id), stdin /dev/null.
    OSError (FileNotFoundError, PermissionError, ...) when it cannot be executed; the
    executable is looked up in env's PATH."""
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
    )


async def wait_child_exit(process: subprocess.Popen, identity: ProcessIdentity) -> int:
    """Wait for a child of this runtime to exit; kill the rest of its process group before
    reaping it, and return the exit code as containerd reports it (128 + signal if killed)."""
    loop = asyncio.get_running_loop()
    exited = loop.create_future()
    pidfd = os.pidfd_open(process.pid)
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    kill_group_leftovers(identity)  # the leader is a zombie until wait() below: safe
    returncode = process.wait()
    await end_group(identity)
    return 128 - returncode if returncode < 0 else returncode


async def wait_adopted_exit(identity: ProcessIdentity) -> None:
    """Wait for a process that is not this runtime's child (started by an earlier runtime
    process) to exit, polling /proc; then kill the rest of its process group."""
    while is_running(identity):
        await asyncio.sleep(ADOPTED_POLL_SECONDS)
    await end_group(identity)


# -- ExecSync -------------------------------------------------------------------------------


class ExecTimedOut(Exception):
    """The command did not exit within its timeout and was killed."""


async def exec_sync(
    argv: Sequence[str], env: Mapping[str, str], cwd: str, timeout: float | None
) -> tuple[bytes, bytes, int]:
    """Run argv on the host and return (stdout, stderr, exit code). Past `timeout` seconds
    (None: no limit) its process group is killed and ExecTimedOut raised; when the caller
    is cancelled (the RPC was cancelled), the process group is killed too."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None
    stdout: list[bytes] = []
    stderr: list[bytes] = []
    readers = [
        asyncio.ensure_future(_read_capped(process.stdout, stdout)),
        asyncio.ensure_future(_read_capped(process.stderr, stderr)),
    ]
    finished = False
    try:
        try:
            await asyncio.wait_for(process.wait(), timeout)
        except asyncio.TimeoutError:
            raise ExecTimedOut() from None
        finished = True
        # Background children may hold the pipes open for long: do not wait for them.
        await asyncio.wait(readers, timeout=EXEC_DRAIN_SECONDS)
        code = process.returncode or 0
        return b"".join(stdout), b"".join(stderr), 128 - code if code < 0 else code
    finally:
        for reader in readers:
            reader.cancel()
        if not finished:
            signal_group(process.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                await asyncio.shield(process.wait())


async def _read_capped(stream: asyncio.StreamReader, chunks: list[bytes]) -> None:
    size = 0
    while chunk := await stream.read(65536):
        if size < EXEC_OUTPUT_CAP:
            chunks.append(chunk[: EXEC_OUTPUT_CAP - size])
        size += len(chunk)
