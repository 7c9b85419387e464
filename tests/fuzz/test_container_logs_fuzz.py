"""The CRI log format and /containerLogs options: parse_cri_line, LogWriter and TailCounter
fed random records (P and F tags, bad timestamps, partial lines), parse_log_options fed
random query strings. Records formatted then parsed give their content back; batching
never changes what a client is sent."""

from __future__ import annotations

from urllib.parse import parse_qs

from hypothesis import example, given, strategies as st

from pykubelet.pods.container_logs import (
    CriLogLine,
    CriLogLineError,
    LogOptions,
    LogOptionsError,
    LogWriter,
    TailCounter,
    parse_cri_line,
    parse_log_options,
    stamp_to_ns,
)

from .support import tried, valid

# --- records ----------------------------------------------------------------------------


@st.composite
def stamps(draw) -> bytes:
    """An RFC 3339 timestamp Go's time.Parse takes: any year, a fraction, Z or an offset."""
    year = draw(st.integers(0, 9999))
    month = draw(st.integers(1, 12))
    day = draw(st.integers(1, 28))
    clock = b"%02d:%02d:%02d" % (draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59)))
    fraction = draw(st.sampled_from([b"", b"."]))
    if fraction:
        fraction += draw(st.from_regex(rb"[0-9]{1,12}", fullmatch=True))
    zone = draw(st.sampled_from([b"Z", b"+00:00", b"-07:30", b"+14:00", b"+24:00"]))
    return b"%04d-%02d-%02dT%s%s%s" % (year, month, day, clock, fraction, zone)


bad_stamps = st.sampled_from([b"", b"2024-02-30T00:00:00Z", b"2023-02-29T00:00:00Z", b"2024-01-01 00:00:00Z", b"2024-01-01T24:00:00Z",
                              b"2024-01-01T00:00:00", b"2024-01-01T00:00:00.Z", b"now", b"2024-13-01T00:00:00Z"])
contents = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b""))
tags = st.sampled_from([b"F", b"P", b"P:x", b"F:y", b"", b"X"])
streams = st.sampled_from([b"stdout", b"stderr"])


def record(stamp: bytes, stream: bytes, tag: bytes, content: bytes) -> bytes:
    return b"%s %s %s %s" % (stamp, stream, tag, content)


good_records = st.builds(record, stamps(), streams, st.sampled_from([b"F", b"P"]), contents)
any_records = st.one_of(
    good_records,
    st.builds(record, stamps() | bad_stamps, streams | st.sampled_from([b"stdin", b""]), tags, contents),
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")),
)


@given(stamps(), streams, st.booleans(), contents)
@example(b"0000-01-01T00:00:00Z", b"stdout", False, b"year 0")  # was ValueError from calendar.timegm
@example(b"0000-02-29T23:59:59.999999999+24:00", b"stderr", True, b"")
def test_a_record_formatted_then_parsed_gives_its_content_back(stamp, stream, partial, content):
    tried("cri log record")
    line = parse_cri_line(record(stamp, stream, b"P" if partial else b"F", content) + b"\n")
    assert (line.stream, line.partial, line.content, line.stamp) == (stream.decode(), partial, content, stamp)
    assert line.timestamp == stamp_to_ns(stamp) / 1e9
    valid("cri log record")


@given(any_records)
def test_any_record_is_a_log_line_or_a_cri_log_line_error(line):
    tried("cri log record")
    try:
        parsed = parse_cri_line(line)
    except CriLogLineError as error:
        assert str(error)
        return
    assert isinstance(parsed, CriLogLine)
    valid("cri log record")


def _expected(records: list[bytes]) -> bytes:
    out = b""
    for line in records:
        try:
            parsed = parse_cri_line(line)
        except CriLogLineError:
            continue
        out += parsed.content + (b"" if parsed.partial else b"\n")
    return out


@given(st.lists(any_records, max_size=12), st.lists(st.integers(0, 12), max_size=4))
def test_the_writer_sends_the_contents_of_the_good_records_however_they_are_batched(records, cuts):
    tried("log writer")
    writer = LogWriter(LogOptions(), now=0.0)
    points = sorted({c % (len(records) + 1) for c in cuts})
    out = b"".join(writer.write(b"".join(r + b"\n" for r in records[a:b]))
                   for a, b in zip([0, *points], [*points, len(records)]))
    assert out == _expected(records)
    assert writer.malformed == len(records) - sum(1 for r in records if not _malformed(r))
    valid("log writer")


def _malformed(line: bytes) -> bool:
    try:
        parse_cri_line(line)
    except CriLogLineError:
        return True
    return False


@given(st.lists(any_records, max_size=12), st.integers(1, 200), st.booleans(), st.booleans(), stamps() | st.none(),
       st.integers(1, 2**63 - 1) | st.none(), st.floats(-1e10, 1e11))
@example([b"2020-01-01T00:00:00Z stdout F a"], 10, False, False, None, 2**63 - 1, 1e9)  # was OverflowError in gmtime
@example([b"9999-12-31T23:59:59Z stdout F a"], 10, True, False, b"9999-12-31T23:59:59-24:00", None, 0.0)
def test_the_writer_with_options_sends_a_prefix_within_the_limit(records, limit, timestamps, unterminated, since, since_seconds, now):
    tried("log writer")
    options = LogOptions(limit_bytes=limit, timestamps=timestamps, since_seconds=since_seconds,
                         since_time=None if since is None else stamp_to_ns(since) / 1e9)
    writer = LogWriter(options, now=now)
    unlimited = LogWriter(LogOptions(timestamps=timestamps, since_seconds=since_seconds, since_time=options.since_time), now=now)
    body = b"".join(r + b"\n" for r in records[:-1]) if unterminated else b"".join(r + b"\n" for r in records)
    out = writer.write(body)
    full = unlimited.write(body)
    if unterminated and records:
        out += writer.write_unterminated(records[-1])
        full += unlimited.write_unterminated(records[-1])
    assert len(out) <= limit and full.startswith(out)
    assert writer.done == (len(full) >= limit) or not writer.done
    if since is not None and since_seconds is None:
        assert len(full) <= len(_expected_with_timestamps(records, timestamps))
    valid("log writer")


def _expected_with_timestamps(records: list[bytes], timestamps: bool) -> bytes:
    return b"".join((b"x" * 31 if timestamps else b"") + r for r in records) + b"\n" * len(records)


def _lines(records: list[bytes]) -> int:
    """Lines in a run of good records: F records, plus a run of P records at the end."""
    partial = [parse_cri_line(r).partial for r in records]
    return partial.count(False) + (1 if partial and partial[-1] else 0)


@given(st.lists(good_records, max_size=15), st.integers(0, 20))
def test_the_tail_holds_the_last_n_lines_and_starts_at_a_line(records, n):
    tried("tail counter")
    counter = TailCounter(n)
    start = 0
    for index in range(len(records) - 1, -1, -1):
        if counter.record(records[index]):
            start = index + 1
            break
    tail = records[start:]
    assert _lines(tail) == min(n, _lines(records))
    assert start in (0, len(records)) or not parse_cri_line(records[start - 1]).partial  # empty, or at a line
    valid("tail counter")


@given(st.lists(any_records, max_size=15), st.integers(-1, 20))
def test_the_tail_counter_takes_any_records(records, n):
    tried("tail counter")
    counter = TailCounter(n)
    for line in reversed(records):
        if counter.record(line):
            break


# --- /containerLogs options -------------------------------------------------------------

_KEYS = ["tailLines", "tail", "limitBytes", "sinceSeconds", "sinceTime", "follow", "previous", "timestamps", "x"]
_VALUES = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "+5", "all", "true", "FALSE", "null", "9223372036854775807", "9223372036854775808",
                     "-9223372036854775809", "1e3", "٣", "2024-01-01T00:00:00Z", "0000-01-01T00:00:00Z",
                     "9999-12-31T23:59:59-24:00", "2024-02-30T00:00:00Z", "2024-01-01T00:00:00.123456789+05:30"]),
    st.text(max_size=12),
    stamps().map(lambda s: s.decode()),
)


@st.composite
def query_strings(draw) -> str:
    pairs = draw(st.lists(st.tuples(st.sampled_from(_KEYS) | st.text(max_size=4), _VALUES), max_size=5))
    from urllib.parse import quote

    text = "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs)
    if draw(st.booleans()):
        text = draw(st.text(max_size=30)) if draw(st.booleans()) else text.replace("=", draw(st.sampled_from(["", "==", "%", "&"])))
    return text


@given(query_strings(), st.floats(0, 4e9))
@example("sinceTime=0000-01-01T00:00:00Z", 1e9)  # was ValueError: year 0 is out of range
@example("sinceSeconds=9223372036854775807", 1e9)  # LogWriter: was OverflowError in time.gmtime
@example("sinceTime=9999-12-31T23:59:59-24:00", 1e9)
def test_a_query_is_log_options_or_a_log_options_error(query, now):
    tried("log options")
    try:
        options = parse_log_options(parse_qs(query, keep_blank_values=True))
    except LogOptionsError as error:
        assert error.status in (400, 422)
        assert any(key in str(error) for key in ("tailLines", "limitBytes", "sinceSeconds", "sinceTime", "tail")), error
        return
    assert isinstance(options, LogOptions)
    writer = LogWriter(options, now=now)  # the options a server would then use
    writer.write(b"2024-01-01T00:00:00Z stdout F x\n0000-01-01T00:00:00+01:00 stderr P y\n")
    valid("log options")
