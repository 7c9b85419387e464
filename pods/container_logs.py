"""What /containerLogs serves, as pure functions: the query's PodLogOptions, the CRI log
record format, and the bytes a client is sent for a run of records.

Go kubelet equivalents: server.go getContainerLogs (the query), validation
ValidatePodLogOptions, kuberuntime/logs/logs.go (parseCRILog, logWriter) and
pkg/util/tail. The file I/O lives in ports/container_log_reader.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

_INT64 = (-(1 << 63), (1 << 63) - 1)
# What Go's time.Parse accepts for the kubelet's layouts: RFC3339 with an optional
# fraction ("." or ",", any number of digits, nanoseconds kept), "Z" or a ±hh:mm offset,
# and only dates that exist (Feb 29 in leap years only).
_DATE = (
    rb"\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
    rb"|02-(?:0[1-9]|1\d|2[0-8]))"
    rb"|(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29"
)
_STAMP = rb"(?:" + _DATE + rb")T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:[.,]\d+)?(?:Z|[+-](?:[01]\d|2[0-4]):[0-5]\d)"
_STAMP_PARTS = re.compile(
    rb"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?(?:Z|([+-])(\d\d):(\d\d))"
)
_STAMP_ONLY = re.compile(_STAMP)
# `<time> <stdout|stderr> <tags> <content>`; tags are ":"-separated, the first says P or F.
_RECORD = re.compile(rb"(" + _STAMP + rb") (stdout|stderr) ([^ ]*) ")
# The common record, a full line (the fast path matches only this).
_FULL_RECORD = re.compile(rb"(?:" + _STAMP + rb") std(?:out|err) F ")
_NL = b"\n"
_YEAR_0 = -62167219200.0  # 0000-01-01T00:00:00Z, the oldest time a record can have
_YEAR_10000_NS = 253402300800 * 1_000_000_000  # 10000-01-01T00:00:00Z


class LogOptionsError(ValueError):
    """A query the kubelet refuses. `status` is the Go kubelet's answer: 400 for a value it
    cannot decode, 422 for options that fail ValidatePodLogOptions."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LogOptions:
    tail_lines: int | None = None
    limit_bytes: int | None = None
    follow: bool = False
    previous: bool = False
    since_seconds: int | None = None
    since_time: float | None = None  # unix seconds
    timestamps: bool = False

    def since(self, now: float) -> float | None:
        """The oldest record time to show (Go: NewLogOptions), or None for all."""
        since = None if self.since_seconds is None else now - self.since_seconds
        if self.since_time is not None and (since is None or self.since_time > since):
            since = self.since_time
        return since


def parse_log_options(query: Mapping[str, list[str]]) -> LogOptions:
    """PodLogOptions from a /containerLogs query string (parse_qs form). Unknown keys are
    ignored, as Go's parameter codec does; `tail` is the old spelling of tailLines."""
    query = dict(query)
    tail = _first(query, "tail")
    if tail:
        query["tailLines"] = [tail]
        if tail == "all":
            del query["tailLines"]
    tail_lines = _int64(query, "tailLines")
    limit_bytes = _int64(query, "limitBytes")
    since_seconds = _int64(query, "sinceSeconds")
    since_time_text = _first(query, "sinceTime")
    since_time = None
    if since_time_text not in (None, "", "null"):  # Go: "" and "null" decode to the zero time
        since_time = _parse_rfc3339(since_time_text)
        if since_time is None:
            raise LogOptionsError(
                f'Unable to decode query: sinceTime: parsing time "{since_time_text}" as '
                '"2006-01-02T15:04:05Z07:00": not an RFC 3339 time',
                400,
            )

    errors = []
    if tail_lines is not None and tail_lines < 0:
        errors.append(f"tailLines: Invalid value: {tail_lines}: must be greater than or equal to 0")
    if limit_bytes is not None and limit_bytes < 1:
        errors.append(f"limitBytes: Invalid value: {limit_bytes}: must be greater than 0")
    if since_seconds is not None and since_time_text is not None:
        errors.append("Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified")
    elif since_seconds is not None and since_seconds < 1:
        errors.append(f"sinceSeconds: Invalid value: {since_seconds}: must be greater than 0")
    if errors:
        raise LogOptionsError(errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]", 422)

    return LogOptions(
        tail_lines=tail_lines,
        limit_bytes=limit_bytes,
        follow=_bool(query, "follow"),
        previous=_bool(query, "previous"),
        since_seconds=since_seconds,
        since_time=since_time,
        timestamps=_bool(query, "timestamps"),
    )


def _first(query: Mapping[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


def _int64(query: Mapping[str, list[str]], key: str) -> int | None:
    text = _first(query, key)
    if text is None:
        return None
    # strconv.ParseInt(s, 10, 64): an optional sign and decimal digits, nothing else.
    problem = "invalid syntax" if not re.fullmatch(r"[+-]?[0-9]+", text) else None
    if problem is None and not _INT64[0] <= int(text) <= _INT64[1]:
        problem = "value out of range"
    if problem:
        raise LogOptionsError(f'Unable to decode query: {key}: strconv.ParseInt: parsing "{text}": {problem}', 400)
    return int(text)


def _bool(query: Mapping[str, list[str]], key: str) -> bool:
    """Go's Convert_Slice_string_To_bool: absent, "0" and "false" (any case) are false;
    anything else, the empty string included, is true."""
    text = _first(query, key)
    return text is not None and text != "0" and text.lower() != "false"


def _parse_rfc3339(text: str) -> float | None:
    stamp = text.encode("ascii", "replace")
    return stamp_to_ns(stamp) / 1e9 if _STAMP_ONLY.fullmatch(stamp) else None


# --- the CRI log format ----------------------------------------------------------------


class CriLogLineError(ValueError):
    """A record that is not `<time> <stream> <tag> <content>`; Go logs it and skips it."""


@dataclass(frozen=True, slots=True)
class CriLogLine:
    timestamp: float  # unix seconds (for exact nanoseconds use `stamp`)
    stream: str  # "stdout" or "stderr"
    partial: bool  # a P record: the line goes on in the next record
    content: bytes  # without the record's newline
    stamp: bytes = b""  # the timestamp as written


def parse_cri_line(line: bytes) -> CriLogLine:
    """One record of a CRI log file, with or without its newline (Go: parseCRILog).
    Raises CriLogLineError, worded as Go's, for a malformed record."""
    if line.endswith(_NL):
        line = line[:-1]
    match = _RECORD.match(line)
    if match is None:
        raise CriLogLineError(_what_is_wrong(line))
    stamp, stream, tag = match.group(1, 2, 3)
    return CriLogLine(
        timestamp=stamp_to_ns(stamp) / 1e9,
        stream=stream.decode(),
        partial=_is_partial(tag),
        content=line[match.end():],
        stamp=stamp,
    )


def _what_is_wrong(line: bytes) -> str:
    fields = line.split(b" ", 3)
    if len(fields) < 2:
        return "timestamp is not found"
    if not _STAMP_ONLY.fullmatch(fields[0]):
        return f"unexpected timestamp format {fields[0]!r}: want RFC3339Nano"
    if len(fields) < 3:
        return "stream type is not found"
    if fields[1] not in (b"stdout", b"stderr"):
        return f"unexpected stream type {fields[1].decode(errors='replace')!r}"
    return "log tag is not found"


def _is_partial(tag: bytes) -> bool:
    return tag == b"P" or tag.startswith(b"P:")


def stamp_to_ns(stamp: bytes) -> int:
    """Unix nanoseconds of a timestamp already matched as RFC3339 (fraction cut at 9 digits)."""
    match = _STAMP_PARTS.match(stamp)
    assert match is not None, stamp
    year, month, day, hour, minute, second, fraction, sign, off_h, off_m = match.groups()
    seconds = _days_from_civil(int(year), int(month), int(day)) * 86400
    seconds += int(hour) * 3600 + int(minute) * 60 + int(second)
    if sign:
        offset = int(off_h) * 3600 + int(off_m) * 60
        seconds -= offset if sign == b"+" else -offset
    nanos = int(fraction[:9].ljust(9, b"0")) if fraction else 0
    return seconds * 1_000_000_000 + nanos


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar, year 0 included (Go's
    time.Parse takes "0000-01-01"; calendar.timegm refuses year 0)."""
    year -= month <= 2
    era, yoe = divmod(year, 400)
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def fixed_timestamp(stamp: bytes) -> bytes:
    """The timestamp as Go's RFC3339NanoFixed prints it: always nine fraction digits, "Z"
    for UTC, the offset as written otherwise."""
    if stamp.endswith(b"Z"):  # what runtimes write: the short way, as it runs per record
        return b"%s.%sZ" % (stamp[:19], stamp[20:-1][:9].ljust(9, b"0"))
    match = _STAMP_PARTS.match(stamp)
    assert match is not None, stamp
    fraction = match[7] or b""
    sign, off_h, off_m = match.group(8, 9, 10)
    zone = b"Z" if not sign or (off_h == b"00" and off_m == b"00") else b"%s%s:%s" % (sign, off_h, off_m)
    return b"%s.%s%s" % (stamp[:19], fraction[:9].ljust(9, b"0"), zone)


# --- what the client is sent -----------------------------------------------------------


class LogWriter:
    """Turns runs of CRI records into the bytes a client is sent (Go: logWriter).

    Each record's content is written as is: a P record's without a newline, so the next
    record continues its line, an F record's with one. `timestamps` prefixes each record
    with its time (RFC3339NanoFixed and a space); records older than `since` are skipped;
    `limit_bytes` cuts the output at exactly that many bytes and sets `done`. With
    `tail_lines` and no `follow`, `done` is set once that many lines are written (Go's
    limited mode: lines written after the tail was found are not sent); a line skipped for
    `since` counts, a malformed record does not. Malformed records are skipped and counted
    in `malformed`, the first kept in `first_malformed` as (record, error) for the
    caller's one log line.
    """

    def __init__(self, options: LogOptions, *, now: float) -> None:
        self._timestamps = options.timestamps
        since = options.since(now)
        if since is not None and since < _YEAR_0:  # a huge sinceSeconds: every record is newer
            since = None
        self._since_ns = None if since is None else round(since * 1_000_000_000)
        # Records in UTC compare by their first 19 bytes unless they share since's second.
        self._since_head = None if since is None else _utc_head(self._since_ns)
        self._remaining = options.limit_bytes
        self._lines_left = options.tail_lines if options.tail_lines is not None and not options.follow else None
        self._plain = not self._timestamps and since is None
        self.done = self._lines_left == 0
        self.malformed = 0
        self.first_malformed: tuple[bytes, str] | None = None

    def write(self, records: bytes) -> bytes:
        """The output for complete records (`records` ends with a newline, or is empty)."""
        if self.done or not records:
            return b""
        lines = records.split(_NL)
        lines.pop()
        out = self._plain_full_lines(lines) if self._plain else None
        if out is None:
            out = self._each_record(lines, last_unterminated=False)
        return self._limit(out)

    def write_unterminated(self, record: bytes) -> bytes:
        """The output for a last record with no newline yet (the file ends mid-record): Go
        writes its content as is, with no newline of its own."""
        if self.done or not record:
            return b""
        return self._limit(self._each_record([record], last_unterminated=True))

    def _plain_full_lines(self, lines: list[bytes]) -> bytes | None:
        # The common case at C speed: every record a valid F record, no options to apply.
        match = _FULL_RECORD.match
        contents = [line[m.end():] for line in lines if (m := match(line))]
        if len(contents) != len(lines):
            return None  # a P record or a malformed one: take the record-by-record path
        if self._lines_left is not None:
            contents = contents[: self._lines_left]
            self._end_lines(len(contents))
        return b"\n".join(contents) + _NL if contents else b""

    def _end_lines(self, count: int) -> None:
        """`count` more lines written: done when the tail's lines are all out."""
        if self._lines_left is not None:
            self._lines_left -= count
            if self._lines_left <= 0:
                self.done = True

    def _each_record(self, lines: list[bytes], *, last_unterminated: bool) -> bytes:
        out: list[bytes] = []
        append = out.append
        match = _RECORD.match
        since_ns, timestamps = self._since_ns, self._timestamps
        for line in lines:
            if self.done:
                break  # the tail's lines are out
            m = match(line)
            if m is None:
                self._skip(line)
                continue
            stamp = m[1]
            ends_line = not last_unterminated and not _is_partial(m[3])
            if since_ns is not None and not self._at_or_after_since(stamp):
                if ends_line:
                    self._end_lines(1)
                continue
            if timestamps:
                append(fixed_timestamp(stamp) + b" ")
            append(line[m.end():])
            if ends_line:
                append(_NL)
                self._end_lines(1)
        return b"".join(out)

    def _at_or_after_since(self, stamp: bytes) -> bool:
        if stamp.endswith(b"Z"):
            head = stamp[:19]
            if head != self._since_head:
                return head > self._since_head  # type: ignore[operator]
        return stamp_to_ns(stamp) >= self._since_ns  # type: ignore[operator]

    def _skip(self, line: bytes) -> None:
        self.malformed += 1
        if self.first_malformed is None:
            self.first_malformed = (line, _what_is_wrong(line))

    def _limit(self, out: bytes) -> bytes:
        if self._remaining is None:
            return out
        if len(out) >= self._remaining:
            out = out[: self._remaining]
            self.done = True
        self._remaining -= len(out)
        return out


def _utc_head(ns: int) -> bytes:
    if ns >= _YEAR_10000_NS:  # after every record's time; a 5-digit year would compare wrong
        return b"\xff" * 19
    t = time.gmtime(ns // 1_000_000_000)
    return b"%04d-%02d-%02dT%02d:%02d:%02d" % (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)


class TailCounter:
    """Finds where the last n lines of a CRI log start (Go: tail.FindTailLineStartIndex),
    fed the file's complete records last first.

    A line is a run of P records ended by an F record; a run of P records at the very end
    (a line still being written) counts as one line too. Go counts records instead, so a
    long line split into P records would start the tail mid-line there. Malformed records
    count for nothing (they are skipped when written).
    """

    def __init__(self, lines: int) -> None:
        self._wanted = lines
        self._seen = 0
        self._begun = False

    def record(self, record: bytes) -> bool:
        """True when the tail starts right after this record."""
        m = _RECORD.match(record)
        if m is None:
            return False
        if not _is_partial(m[3]) or not self._begun:
            if self._seen == self._wanted:
                return True
            self._seen += 1
            self._begun = True
        return False
