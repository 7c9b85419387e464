"""Reads a container's CRI log file for /containerLogs: finds the tail from the end, sends
the formatted records, and with follow keeps reading what the runtime appends, across the
kubelet's log rotation, until the container has exited.

What to send is decided in pods/container_logs.py; this module owns the file descriptors,
the worker threads for file I/O and inotify. The server's route calls
stream_container_log from its Response.stream.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Awaitable

import trio

from pykubelet.pods.container_logs import LogOptions, LogWriter, TailCounter
from pykubelet.ports.inotify import IN_ATTRIB, IN_CREATE, IN_DELETE_SELF, IN_MODIFY, IN_MOVE_SELF, IN_MOVED_TO, Inotify

log = logging.getLogger(__name__)

Send = Callable[[bytes], Awaitable[None]]

READ_BLOCK = 1 << 20  # forward reads, each formatted in a worker thread and sent as one chunk
TAIL_BLOCK = 64 * 1024  # backward reads looking for where the tail starts


def container_log_path(
    pod_logs_dir: str, namespace: str, pod_name: str, pod_uid: str, container: str, restart_count: int
) -> str:
    """<podLogsDir>/<namespace>_<name>_<uid>/<container>/<restartCount>.log, the path the
    kubelet gives the runtime (runtime_config.pod_log_directory and log_path)."""
    return os.path.join(pod_logs_dir, f"{namespace}_{pod_name}_{pod_uid}", container, f"{restart_count}.log")


def previous_log_path(
    pod_logs_dir: str, namespace: str, pod_name: str, pod_uid: str, container: str, restart_count: int
) -> str | None:
    """The log of the attempt before the current one, or None when there was none or its
    log is gone; the caller then answers 400 `previous terminated container "c" in pod
    "p" not found`, as the Go kubelet does."""
    if restart_count < 1:
        return None
    path = container_log_path(pod_logs_dir, namespace, pod_name, pod_uid, container, restart_count - 1)
    return path if os.path.exists(path) else None


async def stream_container_log(
    path: str,
    options: LogOptions,
    send: Send,
    *,
    poll: float = 0.1,
    stop_following: Callable[[], bool] | None = None,
) -> None:
    """Send the log at `path` as /containerLogs does (Go: kuberuntime ReadLogs).

    With options.follow, new records are sent as they are written (inotify; every `poll`
    seconds without it) until `stop_following()` turns true — the container is no longer
    running, and always for options.previous — and what is left has been sent; a rotated
    file is drained and the new one at `path` followed. limitBytes ends the stream once reached; a client that goes away
    (send raises BrokenResourceError or ClosedResourceError) ends it quietly. Raises
    OSError before sending anything if the file cannot be opened.
    """
    writer = LogWriter(options, now=time.time())
    if options.previous:
        stop_following = _always  # a previous attempt has ended: follow only drains it (Go)
    path = os.path.realpath(path)  # as Go does before watching
    current = _LogFile(path)
    if options.tail_lines == 0 and not options.follow:
        current.close()
        return  # Go returns before reading a line
    watch: _Watch | _Poll | None = None
    reported = 0
    try:
        if options.tail_lines is not None:
            current.position = await trio.to_thread.run_sync(_tail_start, current.fd, options.tail_lines)
        stopping = False
        while True:
            out, at_end = await trio.to_thread.run_sync(current.read, writer)
            if writer.malformed and not reported:
                reported = _report_malformed(path, writer)
            if out:
                await send(out)
            if writer.done:
                return
            if not at_end:
                continue
            if not options.follow or stopping:
                out = current.finish(writer)
                if out:
                    await send(out)
                return
            if (rotated := _reopen_if_rotated(path, current)) is not None:
                # The old file is read to its end: what is cut off there, then the new file.
                out = current.finish(writer)
                current.close()
                current = rotated
                if watch is not None:
                    watch.rewatch(current.fd)
                if out:
                    await send(out)
                continue
            if stop_following is not None and stop_following():
                stopping = True  # one more read: what was written before the container ended
                continue
            if watch is None:
                watch = _open_watch(path, current.fd)
                continue  # read once more: a write may have come before the watch
            await watch.wait(poll)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return  # the client went away
    finally:
        if watch is not None:
            watch.close()
        current.close()
        if writer.malformed > reported:
            _report_malformed(path, writer)


def _always() -> bool:
    return True


class _LogFile:
    """One open log file, the read position and a record cut off at the end of the last
    read. Its methods run in a worker thread, one at a time."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        stat = os.fstat(self.fd)
        self.identity = (stat.st_dev, stat.st_ino)
        self.position = 0
        self._cut_off = b""

    def read(self, writer: LogWriter) -> tuple[bytes, bool]:
        """The output for up to READ_BLOCK more bytes, and whether the end was reached."""
        if os.fstat(self.fd).st_size < self.position:  # truncated in place: start over
            self.position, self._cut_off = 0, b""
        data = os.pread(self.fd, READ_BLOCK, self.position)
        self.position += len(data)
        at_end = len(data) < READ_BLOCK  # a regular file reads short only at its end
        if not data:
            return b"", at_end
        if self._cut_off:
            data = self._cut_off + data
        end = data.rfind(b"\n") + 1
        self._cut_off = data[end:]
        return writer.write(data if end == len(data) else data[:end]), at_end

    def finish(self, writer: LogWriter) -> bytes:
        """The output for a last record that has no newline (Go writes it as it is)."""
        record, self._cut_off = self._cut_off, b""
        return writer.write_unterminated(record)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _tail_start(fd: int, lines: int) -> int:
    """The offset where the last `lines` lines start, read backwards in TAIL_BLOCK blocks
    (Go: FindTailLineStartIndex; an unterminated last record is not counted: it is sent
    after them when following, and without follow only if the file has fewer whole lines,
    as the writer stops after `lines` lines then)."""
    counter = TailCounter(lines)
    low = os.fstat(fd).st_size
    buffer = b""
    while (end := buffer.rfind(b"\n") + 1) == 0:
        if low == 0:
            return 0
        buffer, low, _ = _read_before(fd, low, buffer)
    while True:
        newline = buffer.rfind(b"\n", 0, end - 1)
        if newline < 0 and low > 0:
            buffer, low, added = _read_before(fd, low, buffer[:end])
            end += added
            continue
        if counter.record(buffer[newline + 1 : end]):
            return low + end
        if newline < 0:
            return 0
        end = newline + 1


def _read_before(fd: int, low: int, keep: bytes) -> tuple[bytes, int, int]:
    size = min(TAIL_BLOCK, low)
    return os.pread(fd, size, low - size) + keep, low - size, size


def _reopen_if_rotated(path: str, current: _LogFile) -> _LogFile | None:
    """The file now at `path` when it is another than the one open (the kubelet renamed
    the log and the runtime reopened the path); None while there is none or the same."""
    try:
        stat = os.stat(path)
        if (stat.st_dev, stat.st_ino) == current.identity:
            return None
        return _LogFile(path)
    except FileNotFoundError:
        return None


def _report_malformed(path: str, writer: LogWriter) -> int:
    record, error = writer.first_malformed or (b"", "")
    log.error(
        "skipped malformed lines in container log",
        extra={"path": path, "count": writer.malformed, "error": error, "line": record[:200]},
    )
    return writer.malformed


# --- waiting for the file to change --------------------------------------------------------

class _Watch:
    """inotify on the log file (writes, rename, removal) and on its directory (the new
    file after a rotation)."""

    def __init__(self, directory: str, log_fd: int) -> None:
        self._inotify = Inotify()
        self._file = -1
        try:
            self._inotify.add(directory, IN_CREATE | IN_MOVED_TO)
            self.rewatch(log_fd)
        except OSError:
            self.close()
            raise

    def rewatch(self, log_fd: int) -> None:
        """Watch the open file `log_fd` (whatever its name now) instead of the one before."""
        if self._file >= 0:
            self._inotify.remove(self._file)
        self._file = self._inotify.add(f"/proc/self/fd/{log_fd}", IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

    async def wait(self, timeout: float) -> None:
        """Return once something changed, or after `timeout` seconds (the safety net)."""
        with trio.move_on_after(timeout):
            await self._inotify.changed()

    def close(self) -> None:
        self._inotify.close()


class _Poll:
    """The fallback when inotify cannot be had (e.g. the per-user instance limit)."""

    def rewatch(self, log_fd: int) -> None:
        pass

    async def wait(self, timeout: float) -> None:
        await trio.sleep(timeout)

    def close(self) -> None:
        pass


def _open_watch(path: str, log_fd: int) -> _Watch | _Poll:
    try:
        return _Watch(os.path.dirname(path), log_fd)
    except OSError as error:
        log.warning("following container log by polling: %s", error, extra={"path": path})
        return _Poll()
