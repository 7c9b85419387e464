"""Container logs in the CRI format, as containerd writes them.

`CriLineSplitter` (pure) cuts one stream's bytes into `<RFC3339Nano time> <stream> <tag> <line>`
records, `F` for a full line and `P` for a partial one (a line longer than the maximum, or
output that ends without a newline), exactly as containerd's cri/io logger does.
`ContainerLog` is the open log file of one container, shared by its stdout and stderr
forwarders, and reopened on ReopenContainerLog (the kubelet's log rotation).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

log = logging.getLogger("pykubelet.embedded_runtime")

# containerd's max_container_log_line_size default: longer lines are cut into P records.
MAX_LINE_BYTES = 16 * 1024
_READ_BYTES = 64 * 1024

STDOUT = "stdout"
STDERR = "stderr"


def format_timestamp(ns: int) -> str:
    """Go's time.RFC3339Nano in UTC: nanoseconds with trailing zeros trimmed (no fraction
    when it is zero), e.g. "2024-05-01T10:20:30.12345Z"."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    fraction = f"{nanos:09d}".rstrip("0")
    return f"{base}.{fraction}Z" if fraction else f"{base}Z"


class CriLineSplitter:
    """Cuts the bytes of one stream (stdout or stderr) into CRI log records.

    feed() returns the records completed by a chunk; finish() the record for output left
    without a trailing newline at end of stream (tagged P, as containerd does). A "\\r\\n"
    line end is dropped like a "\\n".
    """

    def __init__(self, stream: str, max_line: int = MAX_LINE_BYTES) -> None:
        self._prefix = stream.encode()
        self._max_line = max_line
        self._pending = bytearray()

    def feed(self, data: bytes, now_ns: int | None = None) -> list[bytes]:
        stamp = format_timestamp(time.time_ns() if now_ns is None else now_ns).encode()
        records: list[bytes] = []
        self._pending += data
        start = 0
        pending = self._pending
        while True:
            newline = pending.find(b"\n", start)
            end = len(pending) if newline < 0 else newline
            while end - start > self._max_line:  # too long: cut it into partial records
                records.append(self._record(stamp, b"P", pending[start:start + self._max_line]))
                start += self._max_line
            if newline < 0:
                break
            line = pending[start:newline]
            if line.endswith(b"\r"):
                line = line[:-1]
            records.append(self._record(stamp, b"F", line))
            start = newline + 1
        del pending[:start]
        return records

    def finish(self, now_ns: int | None = None) -> list[bytes]:
        if not self._pending:
            return []
        stamp = format_timestamp(time.time_ns() if now_ns is None else now_ns).encode()
        record = self._record(stamp, b"P", bytes(self._pending))
        self._pending.clear()
        return [record]

    def _record(self, stamp: bytes, tag: bytes, line: bytes | bytearray) -> bytes:
        return b"%s %s %s %s\n" % (stamp, self._prefix, tag, bytes(line))


class ContainerLog:
    """A container's log file, opened for appending; `path` "" discards everything (no
    log_directory or log_path in the CRI configs, as with containerd)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        if path:
            self.reopen()

    def reopen(self) -> None:
        """Open the file at `path` again (after the kubelet renamed it to rotate it)."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        old, self._fd = self._fd, fd
        if old is not None:
            os.close(old)

    def write(self, records: list[bytes]) -> None:
        if self._fd is None or not records:
            return
        try:
            os.write(self._fd, b"".join(records))
        except OSError as error:  # a full disk must not stop draining the container's output
            log.warning("container log %s: write failed: %s", self.path, error)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class StreamForwarder:
    """Reads one non-blocking pipe (a container's stdout or stderr FIFO) on the event loop
    and appends its records to the container's log until end of stream."""

    def __init__(self, fd: int, stream: str, sink: ContainerLog) -> None:
        self._fd = fd
        self._splitter = CriLineSplitter(stream)
        self._sink = sink
        self._loop = asyncio.get_running_loop()
        self.done = asyncio.Event()
        self._loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, _READ_BYTES)
        except BlockingIOError:
            return
        except OSError as error:
            log.warning("container log %s: read failed: %s", self._sink.path, error)
            data = b""
        if data:
            self._sink.write(self._splitter.feed(data))
            return
        self._sink.write(self._splitter.finish())
        self.close()

    def close(self) -> None:
        """Stop reading (at end of stream, or when the runtime gives up waiting for it)."""
        if self.done.is_set():
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self.done.set()
