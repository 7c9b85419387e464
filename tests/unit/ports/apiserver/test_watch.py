"""WatchDecoder: the bytes of a watch stream, however they are cut, become WatchEvents."""

from __future__ import annotations

import json

import pytest

from pykubelet.ports.apiserver import WatchDecoder, WatchEvent


def line(type_: str, rv: str, name: str = "web") -> bytes:
    return json.dumps({"type": type_, "object": {"kind": "Pod", "metadata": {
        "name": name, "resourceVersion": rv}, "spec": {"extra": {"kept": True}}}}).encode() + b"\n"


def test_events_split_across_chunks_are_joined() -> None:
    data = line("ADDED", "5") + line("MODIFIED", "6") + b"\n" + line("BOOKMARK", "7")
    decoder = WatchDecoder()
    events: list[WatchEvent] = []
    for i in range(0, len(data), 7):
        events += decoder.feed(data[i:i + 7])
    events += decoder.end()
    assert [(e.type, e.resource_version) for e in events] == [
        ("ADDED", "5"), ("MODIFIED", "6"), ("BOOKMARK", "7")]
    assert events[0].object["spec"] == {"extra": {"kept": True}}  # nothing dropped


def test_a_last_event_without_newline_is_delivered_at_the_end() -> None:
    decoder = WatchDecoder()
    assert decoder.feed(line("DELETED", "9").rstrip(b"\n")) == []
    assert [e.type for e in decoder.end()] == ["DELETED"]


@pytest.mark.parametrize("data, problem", [
    (b"<html>\n", "not a watch event (JSON is malformed"),
    (b'{"type": "CREATED", "object": {}}\n', "not a watch event (Invalid enum value 'CREATED'"),
    (b'{"type": "ADDED"}\n', "not a watch event (Object missing required field `object`"),
])
def test_a_line_that_is_not_an_event_is_refused(data: bytes, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        WatchDecoder().feed(data)
    assert str(caught.value).startswith(problem)
