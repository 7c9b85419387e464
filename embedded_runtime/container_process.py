"""ContainerProcess: the host process of one running container — its output pipes and log
forwarding, the wait for its exit, and the signals that stop it. EmbeddedRuntime owns one
per started container and learns of the exit through `on_exit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from . import statuses
from .crilog import STDERR, STDOUT, ContainerLog, StreamForwarder
from .processes import (
    ContainerPipes,
    ProcessIdentity,
    identify,
    is_running,
    signal_group,
    start_process,
    wait_adopted_exit,
    wait_child_exit,
)

log = logging.getLogger("pykubelet.embedded_runtime")

LOG_DRAIN_SECONDS = 2.0  # after a container exits, how long its last output may take

# on_exit(finished_at ns, exit code, reason, message)
ExitCallback = Callable[[int, int, str, str], None]


class ContainerProcess:
    def __init__(self, io_dir: Path, log_path: str, on_exit: ExitCallback) -> None:
        self.pipes = ContainerPipes(io_dir)
        self.log_path = log_path
        self.exited = asyncio.Event()
        self.identity: ProcessIdentity | None = None
        self._on_exit = on_exit
        self._log: ContainerLog | None = None
        self._forwarders: list[StreamForwarder] = []
        self._watcher: asyncio.Task | None = None

    def start(self, argv: Sequence[str], env: Mapping[str, str], cwd: str) -> ProcessIdentity:
        """Start argv with its output going to the CRI log. OSError when it cannot run."""
        self.pipes.create()
        # Read ends first: a FIFO that nobody holds open drops what is in it, and a command
        # like `echo hi` may be gone before this runtime gets to read.
        self._forward_logs()
        writers = self.pipes.open_writers()
        try:
            process = start_process(argv, env, cwd, *writers)
        except OSError:
            self._close_logs()
            raise
        finally:
            for fd in writers:
                os.close(fd)
        self.identity = identify(process.pid) or ProcessIdentity(process.pid, 0)
        self._watcher = asyncio.ensure_future(self._watch_child(process, self.identity))
        return self.identity

    def adopt(self, identity: ProcessIdentity) -> None:
        """Watch a process that an earlier runtime process started, and read its pipes on."""
        self.identity = identity
        if self.pipes.exist():
            self._forward_logs()
        else:
            log.warning("process %d: its output pipes are gone; its output is lost", identity.pid)
        self._watcher = asyncio.ensure_future(self._watch_adopted(identity))

    async def stop(self, timeout: float) -> None:
        """TERM to the process group, KILL after `timeout` seconds; returns once exited."""
        assert self.identity is not None
        pgid = self.identity.pid
        if timeout > 0 and is_running(self.identity):
            signal_group(pgid, signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.exited.wait(), timeout)
        if not self.exited.is_set():
            if is_running(self.identity):
                signal_group(pgid, signal.SIGKILL)
            await self.exited.wait()

    def reopen_log(self) -> None:
        if self._log is not None and self._log.path:
            self._log.reopen()

    def _forward_logs(self) -> None:
        self._log = ContainerLog(self.log_path)
        stdout, stderr = self.pipes.open_readers()
        self._forwarders = [
            StreamForwarder(stdout, STDOUT, self._log),
            StreamForwarder(stderr, STDERR, self._log),
        ]

    async def _watch_child(self, process: subprocess.Popen, identity: ProcessIdentity) -> None:
        exit_code = await wait_child_exit(process, identity)
        await self._exit(exit_code, statuses.exit_reason(exit_code), "")

    async def _watch_adopted(self, identity: ProcessIdentity) -> None:
        await wait_adopted_exit(identity)
        await self._exit(statuses.UNKNOWN_EXIT_CODE, statuses.REASON_UNKNOWN, statuses.EXIT_CODE_LOST)

    async def _exit(self, exit_code: int, reason: str, message: str) -> None:
        finished_at = time.time_ns()
        # The last output is in the pipes until the forwarders read it; a process that left
        # the container's process group may hold them open for long: do not wait for it.
        waits = [asyncio.ensure_future(f.done.wait()) for f in self._forwarders]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=LOG_DRAIN_SECONDS)
            for wait in pending:
                wait.cancel()
        self._close_logs()
        self._on_exit(finished_at, exit_code, reason, message)
        self.exited.set()

    def _close_logs(self) -> None:
        for forwarder in self._forwarders:
            forwarder.close()
        self._forwarders = []
        if self._log is not None:
            self._log.close()
            self._log = None
        self.pipes.remove()
