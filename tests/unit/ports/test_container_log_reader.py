"""Reading container logs for /containerLogs on real files with real trio: tail, since,
timestamps, limitBytes, follow (with exit and rotation) and a client that goes away."""

from __future__ import annotations

import calendar
import os
import time

import pytest
import trio

from pykubelet.pods.container_logs import LogOptions
from pykubelet.ports import container_log_reader
from pykubelet.ports.container_log_reader import container_log_path, previous_log_path, stream_container_log

T0 = calendar.timegm((2024, 5, 1, 10, 0, 0))


def rec(second: int, content: bytes, tag: bytes = b"F") -> bytes:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0 + second)).encode()
    return b"%s.5Z stdout %s %s\n" % (stamp, tag, content)


def now_rec(content: bytes) -> bytes:
    ns = time.time_ns()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)).encode()
    return b"%s.%09dZ stdout F %s\n" % (stamp, ns % 10**9, content)


class Client:
    """A Response.stream `send` that keeps what it is sent, and when."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.received = trio.Event()

    async def send(self, data: bytes) -> None:
        self.chunks.append(data)
        self.received.set()

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)

    async def wait_for(self, needle: bytes, timeout: float = 2.0) -> float:
        """Seconds until `needle` was received."""
        start = time.perf_counter()
        with trio.fail_after(timeout):
            while needle not in self.data:
                self.received = trio.Event()
                await self.received.wait()
        return time.perf_counter() - start


async def read_all(path, options: LogOptions = LogOptions(), **kwargs) -> bytes:
    client = Client()
    with trio.fail_after(10):
        await stream_container_log(str(path), options, client.send, **kwargs)
    return client.data


def open_fds() -> list[str]:
    return sorted(os.listdir("/proc/self/fd"))


# --- reading what is there ---------------------------------------------------------------------


async def test_whole_log_is_sent_in_large_chunks(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(b"".join(rec(i % 3600, b"line %06d" % i) for i in range(200_000)))
    client = Client()
    await stream_container_log(str(log), LogOptions(), client.send)
    assert client.data == b"".join(b"line %06d\n" % i for i in range(200_000))
    assert len(client.chunks) <= 10  # ~8 MiB of records: one chunk per 1 MiB read, not per line


async def test_tail_of_a_big_file_reads_only_its_end(tmp_path, monkeypatch):
    log = tmp_path / "0.log"
    log.write_bytes(b"".join(rec(i % 3600, b"%07d " % i + b"x" * 80) for i in range(200_000)))  # ~22 MB
    read = 0
    real_pread = os.pread

    def counting_pread(fd, size, offset):
        nonlocal read
        data = real_pread(fd, size, offset)
        read += len(data)
        return data

    monkeypatch.setattr(container_log_reader.os, "pread", counting_pread)
    out = await read_all(log, LogOptions(tail_lines=10))
    assert out == b"".join(b"%07d " % i + b"x" * 80 + b"\n" for i in range(199_990, 200_000))
    assert read < 128 * 1024


async def test_tail_counts_whole_lines_and_keeps_the_unterminated_last_record(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(rec(1, b"one") + rec(2, b"tw", b"P") + rec(3, b"o") + rec(4, b"thr", b"P") + rec(5, b"ee")[:-1])
    assert await read_all(log, LogOptions(tail_lines=1)) == b"three"
    assert await read_all(log, LogOptions(tail_lines=2)) == b"two\nthree"
    assert await read_all(log, LogOptions(tail_lines=3)) == b"one\ntwo\nthree"
    assert await read_all(log, LogOptions(tail_lines=0)) == b""


async def test_tail_finds_lines_longer_than_a_backward_block(tmp_path):
    long = b"y" * (200 * 1024)
    log = tmp_path / "0.log"
    log.write_bytes(rec(1, b"first") + rec(2, long) + rec(3, b"last"))
    assert await read_all(log, LogOptions(tail_lines=2)) == long + b"\nlast\n"


async def test_since_and_timestamps(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(rec(1, b"old") + rec(10, b"new") + rec(11, b"newer"))
    since = LogOptions(since_time=T0 + 10.0)
    assert await read_all(log, since) == b"new\nnewer\n"
    assert await read_all(log, LogOptions(since_time=T0 + 10.0, timestamps=True)) == (
        b"2024-05-01T10:00:10.500000000Z new\n2024-05-01T10:00:11.500000000Z newer\n"
    )


@pytest.mark.parametrize("limit", [1, 5, 6, 1000, (1 << 20) + 3])
async def test_limit_bytes_is_exact(tmp_path, limit):
    log = tmp_path / "0.log"
    log.write_bytes(b"".join(rec(1, b"%05d" % i) for i in range(300_000)))
    full = await read_all(log)
    assert len(full) > limit
    assert await read_all(log, LogOptions(limit_bytes=limit)) == full[:limit]


async def test_partial_records_are_joined(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(rec(1, b"a" * 10, b"P") + rec(1, b"b" * 10, b"P") + rec(2, b"c") + b"junk\n" + rec(3, b"d"))
    assert await read_all(log) == b"a" * 10 + b"b" * 10 + b"c\nd\n"


async def test_a_missing_file_raises_before_anything_is_sent(tmp_path):
    client = Client()
    with pytest.raises(FileNotFoundError):
        await stream_container_log(str(tmp_path / "none.log"), LogOptions(), client.send)
    assert client.chunks == []


# --- following -----------------------------------------------------------------------------------


async def test_follow_sends_a_line_appended_after_start_at_once(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(rec(1, b"before"))
    client = Client()
    async with trio.open_nursery() as nursery:
        # poll 10 s: only inotify can deliver within the bound
        nursery.start_soon(lambda: stream_container_log(str(log), LogOptions(follow=True), client.send, poll=10))
        await client.wait_for(b"before\n")
        await trio.sleep(0.05)
        latencies = []
        with open(log, "ab", buffering=0) as writer:
            for i in range(20):
                writer.write(now_rec(b"after %d" % i))
                latencies.append(await client.wait_for(b"after %d\n" % i))
        nursery.cancel_scope.cancel()
    assert max(latencies) < 0.5
    assert client.data == b"before\n" + b"".join(b"after %d\n" % i for i in range(20))


async def test_follow_by_polling_when_inotify_is_not_to_be_had(tmp_path, monkeypatch):
    def no_inotify(*args):
        raise OSError(24, "inotify_init1: Too many open files")

    monkeypatch.setattr(container_log_reader, "_Watch", no_inotify)
    log = tmp_path / "0.log"
    log.write_bytes(b"")
    client = Client()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: stream_container_log(str(log), LogOptions(follow=True), client.send, poll=0.02))
        await trio.sleep(0.1)
        with open(log, "ab") as writer:
            writer.write(rec(1, b"polled"))
        assert await client.wait_for(b"polled\n") < 0.5
        nursery.cancel_scope.cancel()


async def test_follow_ends_when_the_container_has_exited_and_drains_what_is_left(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(rec(1, b"running"))
    exited = False
    client = Client()
    async with trio.open_nursery() as nursery:
        done = trio.Event()

        async def follow():
            await stream_container_log(
                str(log), LogOptions(follow=True), client.send, poll=0.05, stop_following=lambda: exited
            )
            done.set()

        nursery.start_soon(follow)
        await client.wait_for(b"running\n")
        await trio.sleep(0.1)
        assert not done.is_set()  # still following while the container runs
        # The container's last words land as it exits, without waking the follower first.
        log.write_bytes(log.read_bytes() + rec(2, b"last words") + rec(3, b"cut", b"P")[:-1])
        exited = True
        with trio.fail_after(1):
            await done.wait()
    assert client.data == b"running\nlast words\ncut"


async def test_follow_continues_in_the_new_file_after_a_rotation(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(rec(1, b"old 1"))
    client = Client()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: stream_container_log(str(log), LogOptions(follow=True), client.send, poll=10))
        await client.wait_for(b"old 1\n")
        with open(log, "ab", buffering=0) as runtime:
            # the kubelet renames the file; the runtime writes on to it until it reopens
            os.rename(log, tmp_path / "0.log.20240501-100000")
            runtime.write(rec(2, b"old 2"))
        await client.wait_for(b"old 2\n")
        with open(log, "ab", buffering=0) as runtime:  # ReopenContainerLog: a new file
            runtime.write(rec(3, b"new 1"))
            await client.wait_for(b"new 1\n")
            runtime.write(rec(4, b"new 2"))
            await client.wait_for(b"new 2\n")
        nursery.cancel_scope.cancel()
    assert client.data == b"old 1\nold 2\nnew 1\nnew 2\n"


async def test_follow_stops_at_the_byte_limit(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(rec(1, b"abc"))
    client = Client()
    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: stream_container_log(str(log), LogOptions(follow=True, limit_bytes=6), client.send, poll=10)
            )
            await client.wait_for(b"abc\n")
            with open(log, "ab") as writer:
                writer.write(rec(2, b"defgh"))
            # returns by itself: the nursery closes without a cancel
    assert client.data == b"abc\nde"


# --- a client that goes away ------------------------------------------------------------------


@pytest.mark.parametrize("error", [trio.BrokenResourceError, trio.ClosedResourceError])
async def test_a_client_going_away_ends_the_stream_and_leaves_no_fd(tmp_path, error):
    log = tmp_path / "0.log"
    log.write_bytes(rec(1, b"hello"))
    sent = []

    async def send(data: bytes) -> None:
        if sent:
            raise error("client went away")
        sent.append(data)

    before = open_fds()
    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: stream_container_log(str(log), LogOptions(follow=True), send, poll=10))
            await trio.sleep(0.1)  # following now: its inotify fd is open
            assert len(open_fds()) > len(before)
            with open(log, "ab") as writer:
                writer.write(rec(2, b"nobody listens"))
            # the send raises; the follower returns by itself
    assert sent == [b"hello\n"]
    assert open_fds() == before


async def test_cancelling_a_follower_leaves_no_fd(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(rec(1, b"hello"))
    before = open_fds()
    with trio.move_on_after(0.2):
        await stream_container_log(str(log), LogOptions(follow=True), Client().send, poll=10)
    assert open_fds() == before


# --- paths -------------------------------------------------------------------------------------


def test_container_log_path_is_the_kubelets():
    assert container_log_path("/var/log/pods", "default", "web", "u-1", "app", 2) == (
        "/var/log/pods/default_web_u-1/app/2.log"
    )


def test_previous_log_path_is_the_attempt_before_when_its_log_is_there(tmp_path):
    directory = tmp_path / "ns_web_u-1" / "app"
    directory.mkdir(parents=True)
    (directory / "0.log").write_bytes(b"")
    assert previous_log_path(str(tmp_path), "ns", "web", "u-1", "app", 1) == str(directory / "0.log")
    assert previous_log_path(str(tmp_path), "ns", "web", "u-1", "app", 0) is None  # no attempt before
    assert previous_log_path(str(tmp_path), "ns", "web", "u-1", "app", 2) is None  # 1.log is gone


async def test_following_a_previous_attempt_only_drains_it(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(rec(1, b"ended"))
    assert await read_all(log, LogOptions(follow=True, previous=True), poll=10) == b"ended\n"
