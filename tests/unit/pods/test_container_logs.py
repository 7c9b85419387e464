"""/containerLogs decisions: the query's options, the CRI record format and the bytes a
client is sent, as the Go kubelet has them (server.go, validation, kuberuntime/logs)."""

from __future__ import annotations

import calendar

import pytest

from pykubelet.pods.container_logs import (
    CriLogLine,
    CriLogLineError,
    LogOptions,
    LogOptionsError,
    LogWriter,
    TailCounter,
    fixed_timestamp,
    parse_cri_line,
    parse_log_options,
    stamp_to_ns,
)

T0 = calendar.timegm((2024, 5, 1, 10, 20, 30))  # 2024-05-01T10:20:30Z


def q(**values: str) -> dict[str, list[str]]:
    return {key: [value] for key, value in values.items()}


# --- options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query, expected",
    [
        ({}, LogOptions()),
        (q(tailLines="10"), LogOptions(tail_lines=10)),
        (q(tailLines="0"), LogOptions(tail_lines=0)),
        (q(tailLines="+7"), LogOptions(tail_lines=7)),
        (q(tail="5"), LogOptions(tail_lines=5)),  # the old spelling
        (q(tail="all", tailLines="3"), LogOptions()),  # "all" removes tailLines
        (q(limitBytes="1"), LogOptions(limit_bytes=1)),
        (q(sinceSeconds="60"), LogOptions(since_seconds=60)),
        (q(sinceTime="2024-05-01T10:20:30Z"), LogOptions(since_time=float(T0))),
        (q(sinceTime="2024-05-01T12:20:30.5+02:00"), LogOptions(since_time=T0 + 0.5)),
        (q(sinceTime=""), LogOptions()),  # Go: the zero time, no filter
        (q(sinceTime="null"), LogOptions()),
        (q(follow="true", previous="1", timestamps="TRUE"), LogOptions(follow=True, previous=True, timestamps=True)),
        (q(follow="", timestamps="yes"), LogOptions(follow=True, timestamps=True)),  # Go: anything but 0/false
        (q(follow="false", previous="0", timestamps="False"), LogOptions()),
        (q(container="c", insecureSkipTLSVerifyBackend="true"), LogOptions()),  # ignored
        ({"tailLines": ["4", "9"]}, LogOptions(tail_lines=4)),  # the first value counts
    ],
)
def test_log_options_from_the_query(query, expected):
    assert parse_log_options(query) == expected


@pytest.mark.parametrize(
    "query, status, message",
    [
        (q(tailLines="-1"), 422, "tailLines: Invalid value: -1: must be greater than or equal to 0"),
        (q(limitBytes="0"), 422, "limitBytes: Invalid value: 0: must be greater than 0"),
        (q(sinceSeconds="0"), 422, "sinceSeconds: Invalid value: 0: must be greater than 0"),
        (
            q(sinceSeconds="5", sinceTime="2024-05-01T10:20:30Z"),
            422,
            "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
        ),
        (
            q(sinceSeconds="5", sinceTime=""),  # given, though empty: still both
            422,
            "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
        ),
        (
            q(tailLines="-1", limitBytes="0"),
            422,
            "[tailLines: Invalid value: -1: must be greater than or equal to 0, "
            "limitBytes: Invalid value: 0: must be greater than 0]",
        ),
        (q(tailLines="ten"), 400, 'tailLines: strconv.ParseInt: parsing "ten": invalid syntax'),
        (q(tailLines=""), 400, 'tailLines: strconv.ParseInt: parsing "": invalid syntax'),
        (q(limitBytes=" 5"), 400, 'limitBytes: strconv.ParseInt: parsing " 5": invalid syntax'),
        (q(sinceSeconds="1_000"), 400, "invalid syntax"),
        (q(tailLines="9223372036854775808"), 400, "value out of range"),
        (q(sinceTime="yesterday"), 400, 'sinceTime: parsing time "yesterday"'),
        (q(sinceTime="2024-02-30T00:00:00Z"), 400, "sinceTime"),
    ],
)
def test_invalid_log_options_are_refused_with_gos_status_and_wording(query, status, message):
    with pytest.raises(LogOptionsError) as refused:
        parse_log_options(query)
    assert refused.value.status == status
    assert message in str(refused.value)
    assert isinstance(refused.value, ValueError)


def test_since_is_the_later_of_since_seconds_and_since_time():
    assert LogOptions().since(1000.0) is None
    assert LogOptions(since_seconds=60).since(1000.0) == 940.0
    assert LogOptions(since_time=500.0).since(1000.0) == 500.0


# --- the CRI record format ---------------------------------------------------------------


@pytest.mark.parametrize(
    "line, expected",
    [
        (
            b"2024-05-01T10:20:30.123456789Z stdout F hello world\n",
            CriLogLine(T0 + 0.123456789, "stdout", False, b"hello world", b"2024-05-01T10:20:30.123456789Z"),
        ),
        (b"2024-05-01T10:20:30Z stderr P part", CriLogLine(T0, "stderr", True, b"part", b"2024-05-01T10:20:30Z")),
        (b"2024-05-01T10:20:30Z stdout F \n", CriLogLine(T0, "stdout", False, b"", b"2024-05-01T10:20:30Z")),
        (
            b"2024-05-01T10:20:30Z stdout F  two  spaces ",
            CriLogLine(T0, "stdout", False, b" two  spaces ", b"2024-05-01T10:20:30Z"),
        ),
        (b"2024-05-01T10:20:30Z stdout P:x more", CriLogLine(T0, "stdout", True, b"more", b"2024-05-01T10:20:30Z")),
        (b"2024-05-01T10:20:30Z stdout F:x more", CriLogLine(T0, "stdout", False, b"more", b"2024-05-01T10:20:30Z")),
        (b"2024-05-01T10:20:30Z stdout  no tag", CriLogLine(T0, "stdout", False, b"no tag", b"2024-05-01T10:20:30Z")),
        (
            b"2024-05-01T12:20:30.5+02:00 stdout F x",
            CriLogLine(T0 + 0.5, "stdout", False, b"x", b"2024-05-01T12:20:30.5+02:00"),
        ),
        (
            b"2024-02-29T00:00:00Z stdout F leap",
            CriLogLine(calendar.timegm((2024, 2, 29, 0, 0, 0)), "stdout", False, b"leap", b"2024-02-29T00:00:00Z"),
        ),
    ],
)
def test_parse_cri_line(line, expected):
    parsed = parse_cri_line(line)
    assert (parsed.stream, parsed.partial, parsed.content, parsed.stamp) == (
        expected.stream, expected.partial, expected.content, expected.stamp
    )
    assert parsed.timestamp == pytest.approx(expected.timestamp, abs=1e-6)  # a float: ~0.2 us


@pytest.mark.parametrize(
    "line, error",
    [
        (b"", "timestamp is not found"),
        (b"garbage", "timestamp is not found"),
        (b"yesterday stdout F x", "unexpected timestamp format"),
        (b"2024-05-01 10:20:30Z stdout F x", "unexpected timestamp format"),
        (b"2024-13-01T10:20:30Z stdout F x", "unexpected timestamp format"),
        (b"2023-02-29T10:20:30Z stdout F x", "unexpected timestamp format"),  # not a leap year
        (b"2024-05-01T24:00:00Z stdout F x", "unexpected timestamp format"),
        (b"2024-05-01T10:20:30 stdout F x", "unexpected timestamp format"),  # no zone
        (b"2024-05-01T10:20:30Z", "timestamp is not found"),
        (b"2024-05-01T10:20:30Z stdout", "stream type is not found"),
        (b"2024-05-01T10:20:30Z stdin F x", "unexpected stream type 'stdin'"),
        (b"2024-05-01T10:20:30Z stdout F", "log tag is not found"),
        (b"2024-05-01T10:20:30Z stdout F\n", "log tag is not found"),
    ],
)
def test_malformed_cri_lines_raise_with_gos_reason(line, error):
    with pytest.raises(CriLogLineError, match=error):
        parse_cri_line(line)


@pytest.mark.parametrize(
    "stamp, fixed, ns",
    [
        (b"2024-05-01T10:20:30Z", b"2024-05-01T10:20:30.000000000Z", T0 * 10**9),
        (b"2024-05-01T10:20:30.5Z", b"2024-05-01T10:20:30.500000000Z", T0 * 10**9 + 500_000_000),
        (b"2024-05-01T10:20:30.123456789Z", b"2024-05-01T10:20:30.123456789Z", T0 * 10**9 + 123456789),
        (b"2024-05-01T10:20:30.1234567891Z", b"2024-05-01T10:20:30.123456789Z", T0 * 10**9 + 123456789),
        (b"2024-05-01T10:20:30,25Z", b"2024-05-01T10:20:30.250000000Z", T0 * 10**9 + 250_000_000),
        (b"2024-05-01T12:20:30.1+02:00", b"2024-05-01T12:20:30.100000000+02:00", T0 * 10**9 + 100_000_000),
        (b"2024-05-01T07:20:30-03:00", b"2024-05-01T07:20:30.000000000-03:00", T0 * 10**9),
        (b"2024-05-01T10:20:30+00:00", b"2024-05-01T10:20:30.000000000Z", T0 * 10**9),
    ],
)
def test_timestamps_print_as_rfc3339nanofixed_and_parse_to_exact_nanoseconds(stamp, fixed, ns):
    assert fixed_timestamp(stamp) == fixed
    assert stamp_to_ns(stamp) == ns


# --- what the client is sent ---------------------------------------------------------------


def rec(second: int, content: bytes, tag: bytes = b"F", stream: bytes = b"stdout", fraction: bytes = b"") -> bytes:
    stamp = b"2024-05-01T10:20:%02d%sZ" % (second, b"." + fraction if fraction else b"")
    return b"%s %s %s %s\n" % (stamp, stream, tag, content)


def write(options: LogOptions, *blocks: bytes, now: float = T0 + 60) -> bytes:
    writer = LogWriter(options, now=now)
    return b"".join(writer.write(block) for block in blocks)


def test_full_records_are_sent_as_lines():
    assert write(LogOptions(), rec(1, b"a") + rec(2, b"b", stream=b"stderr")) == b"a\nb\n"
    assert write(LogOptions(), b"") == b""


def test_partial_records_are_joined_into_one_line():
    block = rec(1, b"he", b"P") + rec(1, b"ll", b"P") + rec(2, b"o") + rec(3, b"next")
    assert write(LogOptions(), block) == b"hello\nnext\n"
    # the same across blocks: a P record's content has no newline of its own
    assert write(LogOptions(), rec(1, b"he", b"P"), rec(2, b"llo")) == b"hello\n"


def test_timestamps_prefix_each_record_in_gos_fixed_format():
    block = rec(1, b"a", fraction=b"5") + rec(2, b"he", b"P") + rec(3, b"llo")
    assert write(LogOptions(timestamps=True), block) == (
        b"2024-05-01T10:20:01.500000000Z a\n"
        # Go prefixes every record, so a joined line carries its parts' times inside it
        b"2024-05-01T10:20:02.000000000Z he2024-05-01T10:20:03.000000000Z llo\n"
    )


def test_since_skips_records_older_than_it():
    block = rec(9, b"old") + rec(10, b"edge") + rec(10, b"late", fraction=b"000000001") + rec(11, b"new")
    since = calendar.timegm((2024, 5, 1, 10, 20, 10))
    assert write(LogOptions(since_time=float(since)), block) == b"edge\nlate\nnew\n"
    # sinceSeconds counts back from now
    assert write(LogOptions(since_seconds=50), block, now=since + 51) == b"new\n"
    # a record in another zone is compared by its instant
    other_zone = b"2024-05-01T12:20:09+02:00 stdout F before\n2024-05-01T12:20:10+02:00 stdout F at\n"
    assert write(LogOptions(since_time=float(since)), other_zone) == b"at\n"


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 7, 100])
def test_limit_bytes_cuts_the_output_at_exactly_the_limit(limit):
    blocks = [rec(1, b"ab"), rec(2, b"cd", b"P") + rec(3, b"e")]
    full = write(LogOptions(), *blocks)
    writer = LogWriter(LogOptions(limit_bytes=limit), now=T0)
    out = b"".join(writer.write(block) for block in blocks)
    assert out == full[:limit]
    assert writer.done == (limit <= len(full))
    assert writer.write(rec(4, b"more")) == (b"" if writer.done else b"more\n"[: limit - len(full)])


def test_limit_bytes_counts_the_timestamp_prefix():
    assert write(LogOptions(limit_bytes=12, timestamps=True), rec(1, b"a")) == b"2024-05-01T1"


def test_malformed_records_are_skipped_and_counted():
    writer = LogWriter(LogOptions(), now=T0)
    out = writer.write(rec(1, b"a") + b"not a record\n" + rec(2, b"b") + b"2024-05-01T10:20:30Z stdin F x\n")
    assert out == b"a\nb\n"
    assert writer.malformed == 2
    line, error = writer.first_malformed
    assert line == b"not a record" and error.startswith("unexpected timestamp format")


def test_fast_and_record_by_record_paths_agree():
    # the fast path takes blocks of plain F records; a P record sends a block the slow way
    plain = b"".join(rec(i % 60, b"line %d" % i, stream=b"stderr" if i % 3 else b"stdout") for i in range(200))
    with_partial = plain + rec(59, b"x", b"P") + rec(59, b"y")
    assert write(LogOptions(), with_partial) == write(LogOptions(), plain) + b"xy\n"
    assert write(LogOptions(since_time=0.0), plain) == write(LogOptions(), plain)


def test_tail_lines_without_follow_sends_no_line_written_after_the_tail():
    # Go's limited mode: a line the container writes between finding the tail and reading
    # it is not sent, on either path (the fast one, the record-by-record one).
    writer = LogWriter(LogOptions(tail_lines=2), now=T0)
    assert writer.write(rec(1, b"a") + rec(2, b"b") + rec(3, b"written since")) == b"a\nb\n"
    assert writer.done and writer.write(rec(4, b"more")) == b"" and writer.write_unterminated(b"x") == b""
    writer = LogWriter(LogOptions(tail_lines=2), now=T0)
    assert writer.write(rec(1, b"he", b"P") + rec(1, b"llo") + rec(2, b"b") + rec(3, b"c")) == b"hello\nb\n"
    assert writer.done
    # a line skipped for since counts (it is one of the tail's), a malformed record does not
    since = float(calendar.timegm((2024, 5, 1, 10, 20, 2)))
    writer = LogWriter(LogOptions(tail_lines=2, since_time=since), now=T0)
    assert writer.write(rec(1, b"old") + b"not a record\n" + rec(2, b"b") + rec(3, b"c")) == b"b\n"
    # tailLines=0 sends nothing, on either path
    assert write(LogOptions(tail_lines=0), rec(1, b"a")) == b""
    assert write(LogOptions(tail_lines=0, timestamps=True), rec(1, b"a")) == b""
    # following, or without tailLines, every line is sent
    assert write(LogOptions(tail_lines=1, follow=True), rec(1, b"a") + rec(2, b"b")) == b"a\nb\n"
    assert write(LogOptions(), rec(1, b"a") + rec(2, b"b")) == b"a\nb\n"


def test_an_unterminated_last_record_is_written_without_a_newline():
    writer = LogWriter(LogOptions(), now=T0)
    assert writer.write_unterminated(rec(1, b"tail")[:-1]) == b"tail"
    assert writer.write_unterminated(b"") == b""


# --- where the tail starts ---------------------------------------------------------------------


def tail_start(records: list[bytes], lines: int) -> int:
    """The index of the first record of the tail (len(records): none)."""
    counter = TailCounter(lines)
    for index in range(len(records) - 1, -1, -1):
        if counter.record(records[index]):
            return index + 1
    return 0


F, P, BAD = rec(1, b"f"), rec(1, b"p", b"P"), b"junk\n"


@pytest.mark.parametrize(
    "records, lines, start",
    [
        ([F, F, F], 0, 3),
        ([F, F, F], 1, 2),
        ([F, F, F], 2, 1),
        ([F, F, F], 3, 0),
        ([F, F, F], 10, 0),
        ([F, P, P, F], 1, 1),  # a line split into P records counts once
        ([F, P, P, F], 2, 0),
        ([F, F, P], 1, 2),  # a line still being written counts as one
        ([F, F, P], 2, 1),
        ([F, P, F, P, P], 2, 1),
        ([F, BAD, F], 1, 1),  # malformed records count for nothing (and are skipped)
        ([F, BAD, F, F], 2, 1),
        ([F, F, BAD], 1, 1),
        ([], 3, 0),
    ],
)
def test_tail_counts_whole_lines_from_the_end(records, lines, start):
    assert tail_start(records, lines) == start
