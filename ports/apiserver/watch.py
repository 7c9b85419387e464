"""Watch events and the decoder of a watch stream (newline-delimited JSON), sans I/O.

The client feeds it the bytes of a `?watch=true` response as they arrive and gets
WatchEvents back; an object stays a plain dict so that no field is lost.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]


class WatchEvent(msgspec.Struct, frozen=True):
    """One watch event. For ERROR the object is a metav1.Status (the client raises it
    as an ApiError instead of yielding it; Gone for 410)."""

    type: EventType
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        metadata = self.object.get("metadata")
        return str(metadata.get("resourceVersion") or "") if isinstance(metadata, dict) else ""


_decoder = msgspec.json.Decoder(WatchEvent)

# One event never needs more; a stream that sends more without a newline is not the API.
MAX_EVENT_BYTES = 64 * 1024 * 1024


class WatchDecoder:
    """Splits a watch stream into events: feed() the bytes, end() at the end of the stream."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[WatchEvent]:
        """The events completed by `data` (ValueError for a line that is not an event)."""
        self._buffer += data
        events = []
        while (newline := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:newline]).strip()
            del self._buffer[: newline + 1]
            if line:
                events.append(decode_event(line))
        if len(self._buffer) > MAX_EVENT_BYTES:
            raise ValueError(f"watch event larger than {MAX_EVENT_BYTES} bytes without a newline")
        return events

    def end(self) -> list[WatchEvent]:
        """The last event, if the stream ended without a final newline."""
        line, self._buffer = bytes(self._buffer).strip(), bytearray()
        return [decode_event(line)] if line else []


def decode_event(line: bytes) -> WatchEvent:
    try:
        return _decoder.decode(line)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # ValidationError included; a string not UTF-8
        shown = line[:200].decode("utf-8", "replace")
        raise ValueError(f"not a watch event ({exc}): {shown!r}") from None
