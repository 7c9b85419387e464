"""HPACK (RFC 7541), as much as a gRPC client needs: a full decoder for the header blocks a
server sends (static and dynamic table, Huffman strings, table size updates), and an
encoder that never indexes (literal fields and the static table only), so that the
server's decoder state for us never changes and a request's block can be built alone.
"""

from __future__ import annotations

from . import huffman

# RFC 7541 Appendix A; index 1 is STATIC[0].
STATIC = (
    (b":authority", b""), (b":method", b"GET"), (b":method", b"POST"), (b":path", b"/"),
    (b":path", b"/index.html"), (b":scheme", b"http"), (b":scheme", b"https"),
    (b":status", b"200"), (b":status", b"204"), (b":status", b"206"), (b":status", b"304"),
    (b":status", b"400"), (b":status", b"404"), (b":status", b"500"),
    (b"accept-charset", b""), (b"accept-encoding", b"gzip, deflate"), (b"accept-language", b""),
    (b"accept-ranges", b""), (b"accept", b""), (b"access-control-allow-origin", b""),
    (b"age", b""), (b"allow", b""), (b"authorization", b""), (b"cache-control", b""),
    (b"content-disposition", b""), (b"content-encoding", b""), (b"content-language", b""),
    (b"content-length", b""), (b"content-location", b""), (b"content-range", b""),
    (b"content-type", b""), (b"cookie", b""), (b"date", b""), (b"etag", b""), (b"expect", b""),
    (b"expires", b""), (b"from", b""), (b"host", b""), (b"if-match", b""),
    (b"if-modified-since", b""), (b"if-none-match", b""), (b"if-range", b""),
    (b"if-unmodified-since", b""), (b"last-modified", b""), (b"link", b""), (b"location", b""),
    (b"max-forwards", b""), (b"proxy-authenticate", b""), (b"proxy-authorization", b""),
    (b"range", b""), (b"referer", b""), (b"refresh", b""), (b"retry-after", b""),
    (b"server", b""), (b"set-cookie", b""), (b"strict-transport-security", b""),
    (b"transfer-encoding", b""), (b"user-agent", b""), (b"vary", b""), (b"via", b""),
    (b"www-authenticate", b""),
)
_STATIC_FIELD = {field: index + 1 for index, field in reversed(list(enumerate(STATIC)))}
_STATIC_NAME = {name: index + 1 for index, (name, _) in reversed(list(enumerate(STATIC)))}
_ENTRY_OVERHEAD = 32  # RFC 7541 4.1: an entry's size is its name, its value and 32
_KNOWN_BLOCKS = 64  # header blocks a decoder remembers the reading of


class HpackError(ValueError):
    """A header block this decoder cannot read: a COMPRESSION_ERROR of the connection."""


def encode(headers: list[tuple[bytes, bytes]]) -> bytes:
    """A header block of `headers`, in order: static-table references where a field or
    name is in the table, every other field a literal never added to any table."""
    out = bytearray()
    for name, value in headers:
        index = _STATIC_FIELD.get((name, value))
        if index is not None:
            out += _integer(index, 7, 0x80)
            continue
        index = _STATIC_NAME.get(name, 0)
        out += _integer(index, 4, 0x00)  # literal without indexing
        if not index:
            out += _integer(len(name), 7, 0x00) + name
        out += _integer(len(value), 7, 0x00) + value
    return bytes(out)


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Decoder:
    """One connection's decoder: the dynamic table lives as long as the connection, and
    every header block the peer sends must pass through it in order."""

    def __init__(self, max_table_size: int = 4096) -> None:
        self.max_table_size = max_table_size  # what we allow the peer (SETTINGS_HEADER_TABLE_SIZE)
        self.table_size = max_table_size  # the peer's current choice, up to that
        self._entries: list[tuple[bytes, bytes]] = []  # newest first
        self._size = 0
        # Blocks read since the table last changed, and what they said. A server's answers
        # repeat (grpc-go indexes ":status: 200", its content-type and "grpc-status: 0" once,
        # then sends the same few bytes of references): the same block against the same
        # table reads the same, so it is read once. Any change of the table forgets them.
        self._known: dict[bytes, tuple[tuple[bytes, bytes], ...]] = {}

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        known = self._known.get(block)
        if known is not None:
            return list(known)
        headers: list[tuple[bytes, bytes]] = []
        position = 0
        end = len(block)
        changes = False  # the block adds to the table or resizes it
        while position < end:
            first = block[position]
            if first & 0x80:  # indexed field
                index, position = _read_integer(block, position, 7)
                headers.append(self._field(index))
            elif first & 0x40:  # literal, added to the dynamic table
                changes = True
                field, position = self._literal(block, position, 6)
                self._add(field)
                headers.append(field)
            elif first & 0x20:  # dynamic table size update
                changes = True
                if headers:
                    raise HpackError("a table size update after a header field")
                size, position = _read_integer(block, position, 5)
                if size > self.max_table_size:
                    raise HpackError(f"table size update to {size}, above the {self.max_table_size} allowed")
                self.table_size = size
                self._evict(0)
            else:  # literal without indexing (0000) or never indexed (0001)
                field, position = self._literal(block, position, 4)
                headers.append(field)
        if changes:
            self._known.clear()
        else:
            if len(self._known) >= _KNOWN_BLOCKS:  # (varied blocks, e.g. error messages: start over)
                self._known.clear()
            self._known[block] = tuple(headers)
        return headers

    def _field(self, index: int) -> tuple[bytes, bytes]:
        if index == 0:
            raise HpackError("header index 0")
        if index <= len(STATIC):
            return STATIC[index - 1]
        dynamic = index - len(STATIC) - 1
        if dynamic >= len(self._entries):
            raise HpackError(f"header index {index} past the dynamic table")
        return self._entries[dynamic]

    def _literal(self, block: bytes, position: int, prefix_bits: int) -> tuple[tuple[bytes, bytes], int]:
        index, position = _read_integer(block, position, prefix_bits)
        if index:
            name = self._field(index)[0]
        else:
            name, position = _read_string(block, position)
        value, position = _read_string(block, position)
        return (name, value), position

    def _add(self, field: tuple[bytes, bytes]) -> None:
        size = len(field[0]) + len(field[1]) + _ENTRY_OVERHEAD
        if size > self.table_size:  # RFC 7541 4.4: an entry too large empties the table
            self._entries.clear()
            self._size = 0
            return
        self._evict(size)
        self._entries.insert(0, field)
        self._size += size

    def _evict(self, room: int) -> None:
        while self._entries and self._size + room > self.table_size:
            name, value = self._entries.pop()
            self._size -= len(name) + len(value) + _ENTRY_OVERHEAD


def _read_integer(block: bytes, position: int, prefix_bits: int) -> tuple[int, int]:
    limit = (1 << prefix_bits) - 1
    try:
        value = block[position] & limit
        position += 1
        if value < limit:
            return value, position
        shift = 0
        while True:
            octet = block[position]
            position += 1
            value += (octet & 0x7F) << shift
            if not octet & 0x80:
                return value, position
            shift += 7
            if shift > 28:
                raise HpackError("an integer longer than 4 octets")
    except IndexError:
        raise HpackError("a header block ends inside an integer") from None


def _read_string(block: bytes, position: int) -> tuple[bytes, int]:
    if position >= len(block):
        raise HpackError("a header block ends before a string")
    coded = block[position] & 0x80
    length, position = _read_integer(block, position, 7)
    end = position + length
    if end > len(block):
        raise HpackError("a header block ends inside a string")
    raw = block[position:end]
    if coded:
        try:
            raw = huffman.decode(raw)
        except huffman.HuffmanError as error:
            raise HpackError(str(error)) from None
    return raw, end
