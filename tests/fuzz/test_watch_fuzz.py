"""The API watch stream decoder: newline-delimited JSON split anywhere, garbage lines and
huge lines. Every input is WatchEvents or a ValueError naming the line; how the bytes are
split into chunks never changes the events."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, strategies as st

from pykubelet.ports.apiserver.watch import MAX_EVENT_BYTES, WatchDecoder, WatchEvent, decode_event

from .support import tried, valid

objects = st.fixed_dictionaries(
    {"kind": st.sampled_from(["Pod", "Status", "Node"]), "metadata": st.fixed_dictionaries(
        {"name": st.text(max_size=10)}, optional={"resourceVersion": st.integers(0, 10**9).map(str)})},
    optional={"spec": st.dictionaries(st.text(max_size=5), st.text(max_size=20) | st.integers(), max_size=3)},
)
events = st.builds(lambda t, o: {"type": t, "object": o}, st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]), objects)
garbage_lines = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"{", b"null", b"[]", b'{"type": "ADDED"}', b'{"type": "NOPE", "object": {}}', b'{"type": "ADDED", "object": []}',
                     b'{"type": "ADDED", "object": {}} trailing', b"\xff\xfe", b'{"type": "ADDED", "object": {"a": "\xff"}}', b"[" * 2000]),
)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


def _decode_all(chunks: list[bytes]) -> list[WatchEvent]:
    tried("watch stream")
    decoder = WatchDecoder()
    out = []
    for chunk in chunks:
        out += decoder.feed(chunk)
    out += decoder.end()
    return out


@given(st.lists(events, max_size=8), st.lists(st.integers(0, 10**6), max_size=10), st.sampled_from([b"\n", b"\r\n", b"\n\n"]), st.booleans())
def test_events_split_anywhere_decode_to_the_events_sent(sent, cuts, newline, final_newline):
    data = newline.join(json.dumps(e).encode() for e in sent) + (newline if final_newline else b"")
    decoded = _decode_all(_chunks(data, cuts))
    assert [{"type": e.type, "object": e.object} for e in decoded] == sent
    valid("watch stream")


@given(st.lists(events.map(lambda e: json.dumps(e).encode()) | garbage_lines, max_size=8), st.lists(st.integers(0, 10**6), max_size=10))
def test_a_stream_with_garbage_is_events_or_a_value_error(lines, cuts):
    try:
        decoded = _decode_all(_chunks(b"\n".join(lines), cuts))
    except ValueError as error:
        assert "watch event" in str(error)
        return
    assert all(isinstance(e, WatchEvent) for e in decoded)
    valid("watch stream")


@given(st.binary(max_size=300))
@example(b'{"type": "ADDED", "object": {"metadata": {"resourceVersion": 5}}}')
@example(b'{"type": "ADDED", "object": {"metadata": [1]}}')  # was AttributeError in resource_version
@example(b"{\"type\": \"ADDED\", \"object\": {\"a\": \"\xff\"}}")
def test_any_line_is_an_event_or_a_value_error(line):
    tried("watch event")
    try:
        event = decode_event(line)
    except ValueError as error:
        assert str(error).startswith("not a watch event")
        return
    assert isinstance(event.resource_version, str)
    valid("watch event")


def test_a_line_over_the_limit_without_a_newline_is_refused():
    tried("watch stream")
    decoder = WatchDecoder()
    chunk = b"x" * (1 << 20)
    with pytest.raises(ValueError, match="larger than"):
        for _ in range(MAX_EVENT_BYTES // len(chunk) + 1):
            decoder.feed(chunk)


any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@given(st.sampled_from(["ADDED", "ERROR", "added", ""]), any_json, any_json)
def test_an_event_with_any_metadata_has_a_resource_version_or_is_refused(type_, metadata, version):
    tried("watch event")
    line = json.dumps({"type": type_, "object": {"metadata": metadata if metadata != {} else {"resourceVersion": version}}}).encode()
    try:
        event = decode_event(line)
    except ValueError as error:
        assert str(error).startswith("not a watch event")
        return
    assert isinstance(event.resource_version, str)
    valid("watch event")
