"""The CRI log format as containerd writes it: timestamps, F and P records, reopening."""

from __future__ import annotations

import asyncio
import os

import pytest

from pykubelet.embedded_runtime.crilog import (
    ContainerLog,
    CriLineSplitter,
    StreamForwarder,
    format_timestamp,
)

NOW = 1_714_558_830_123_450_000  # 2024-05-01T10:20:30.12345Z
STAMP = b"2024-05-01T10:20:30.12345Z"


@pytest.mark.parametrize(
    ("ns", "expected"),
    [
        (NOW, "2024-05-01T10:20:30.12345Z"),  # trailing zeros trimmed, as Go's RFC3339Nano
        (1_714_558_830_000_000_000, "2024-05-01T10:20:30Z"),  # no fraction at all
        (1_714_558_830_000_000_001, "2024-05-01T10:20:30.000000001Z"),
        (0, "1970-01-01T00:00:00Z"),
    ],
)
def test_timestamps_are_go_rfc3339nano_in_utc(ns: int, expected: str) -> None:
    assert format_timestamp(ns) == expected


def test_full_lines_are_tagged_f_with_stream_and_time() -> None:
    splitter = CriLineSplitter("stdout")
    assert splitter.feed(b"hello\nworld\n", NOW) == [
        STAMP + b" stdout F hello\n",
        STAMP + b" stdout F world\n",
    ]


def test_a_line_split_across_reads_is_one_record() -> None:
    splitter = CriLineSplitter("stderr")
    assert splitter.feed(b"hel", NOW) == []
    assert splitter.feed(b"lo\n", NOW) == [STAMP + b" stderr F hello\n"]


def test_crlf_and_empty_lines() -> None:
    splitter = CriLineSplitter("stdout")
    assert splitter.feed(b"dos\r\n\n", NOW) == [
        STAMP + b" stdout F dos\n",
        STAMP + b" stdout F \n",
    ]


def test_output_ending_without_newline_is_a_partial_record_at_the_end() -> None:
    splitter = CriLineSplitter("stdout")
    assert splitter.feed(b"done\nno newline", NOW) == [STAMP + b" stdout F done\n"]
    assert splitter.finish(NOW) == [STAMP + b" stdout P no newline\n"]
    assert splitter.finish(NOW) == []


def test_a_line_longer_than_the_maximum_is_cut_into_partial_records() -> None:
    splitter = CriLineSplitter("stdout", max_line=4)
    assert splitter.feed(b"abcdefghij\n", NOW) == [
        STAMP + b" stdout P abcd\n",
        STAMP + b" stdout P efgh\n",
        STAMP + b" stdout F ij\n",
    ]
    # Exactly the maximum is still a full line; cutting also happens before the newline comes.
    assert splitter.feed(b"abcd\nefghi", NOW) == [STAMP + b" stdout F abcd\n", STAMP + b" stdout P efgh\n"]
    assert splitter.feed(b"\n", NOW) == [STAMP + b" stdout F i\n"]


def test_container_log_reopens_at_its_path_after_a_rename(tmp_path) -> None:
    path = tmp_path / "pod" / "main" / "0.log"
    log = ContainerLog(str(path))  # creates the folders, as containerd does
    log.write([b"a\n"])
    os.rename(path, tmp_path / "rotated.log")
    log.write([b"b\n"])
    log.reopen()
    log.write([b"c\n", b"d\n"])
    log.close()
    assert (tmp_path / "rotated.log").read_bytes() == b"a\nb\n"
    assert path.read_bytes() == b"c\nd\n"


def test_container_log_without_a_path_discards() -> None:
    log = ContainerLog("")
    log.write([b"nowhere\n"])
    log.close()


def test_forwarder_writes_each_stream_until_end_of_stream(tmp_path) -> None:
    path = tmp_path / "0.log"

    async def forward() -> None:
        log = ContainerLog(str(path))
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        for fd in (out_read, err_read):
            os.set_blocking(fd, False)
        forwarders = [StreamForwarder(out_read, "stdout", log), StreamForwarder(err_read, "stderr", log)]
        os.write(out_write, b"one\ntw")
        os.write(err_write, b"oops\n")
        await asyncio.sleep(0.01)
        os.write(out_write, b"o\nthree")
        os.close(out_write)
        os.close(err_write)
        await asyncio.wait_for(asyncio.gather(*(f.done.wait() for f in forwarders)), 2)
        log.close()

    asyncio.run(forward())
    records = [line.split(b" ", 1)[1] for line in path.read_bytes().splitlines()]
    assert sorted(records) == sorted([b"stdout F one", b"stderr F oops", b"stdout F two", b"stdout P three"])
