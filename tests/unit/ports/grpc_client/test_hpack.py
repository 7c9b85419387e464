"""HPACK: the decoder reads RFC 7541's example header blocks in order (static and dynamic
table, Huffman strings, eviction), and what the encoder writes decodes back."""

from __future__ import annotations

import pytest

from pykubelet.ports.grpc_client import hpack


def fields(*pairs: str) -> list[tuple[bytes, bytes]]:
    return [(pairs[i].encode(), pairs[i + 1].encode()) for i in range(0, len(pairs), 2)]


# RFC 7541 C.4: three requests on one connection, with Huffman coding.
C4 = [
    ("828684418cf1e3c2e5f23a6ba0ab90f4ff",
     fields(":method", "GET", ":scheme", "http", ":path", "/", ":authority", "www.example.com")),
    ("828684be5886a8eb10649cbf",
     fields(":method", "GET", ":scheme", "http", ":path", "/", ":authority", "www.example.com",
            "cache-control", "no-cache")),
    ("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
     fields(":method", "GET", ":scheme", "https", ":path", "/index.html", ":authority", "www.example.com",
            "custom-key", "custom-value")),
]

# RFC 7541 C.3: the same without Huffman coding.
C3 = [
    ("828684410f7777772e6578616d706c652e636f6d",
     fields(":method", "GET", ":scheme", "http", ":path", "/", ":authority", "www.example.com")),
    ("828684be58086e6f2d6361636865",
     fields(":method", "GET", ":scheme", "http", ":path", "/", ":authority", "www.example.com",
            "cache-control", "no-cache")),
    ("828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
     fields(":method", "GET", ":scheme", "https", ":path", "/index.html", ":authority", "www.example.com",
            "custom-key", "custom-value")),
]


@pytest.mark.parametrize("blocks", [C3, C4], ids=["plain", "huffman"])
def test_rfc_request_sequence_decodes_through_the_dynamic_table(blocks) -> None:
    decoder = hpack.Decoder()
    for block, expected in blocks:
        assert decoder.decode(bytes.fromhex(block)) == expected


def test_entries_past_the_table_size_are_evicted_oldest_first() -> None:
    decoder = hpack.Decoder()
    decoder.decode(bytes.fromhex("3f21"))  # size update to 64 (5-bit prefix: 31 + 33)
    assert decoder.table_size == 64
    first = b"\x40\x01a\x01b"  # a: b, indexed: 1 + 1 + 32 = 34
    second = b"\x40\x01c\x01d"
    assert decoder.decode(first) == [(b"a", b"b")]
    assert decoder.decode(second) == [(b"c", b"d")]  # 68 > 64: a: b goes
    assert decoder.decode(b"\xbe") == [(b"c", b"d")]  # index 62, the newest
    with pytest.raises(hpack.HpackError):
        decoder.decode(b"\xbf")  # index 63: evicted


def test_a_size_update_above_what_we_allow_is_refused() -> None:
    with pytest.raises(hpack.HpackError):
        hpack.Decoder(max_table_size=4096).decode(bytes.fromhex("3fe21f"))  # 4097


def test_literals_never_indexed_and_without_indexing_leave_the_table_alone() -> None:
    decoder = hpack.Decoder()
    assert decoder.decode(b"\x10\x01x\x01y" + b"\x00\x01p\x01q") == [(b"x", b"y"), (b"p", b"q")]
    with pytest.raises(hpack.HpackError):
        decoder.decode(b"\xbe")


@pytest.mark.parametrize("block", [b"\x80", b"\x40\x05ab", b"\xff", b"\x41"])
def test_malformed_blocks_raise_hpack_error(block) -> None:
    with pytest.raises(hpack.HpackError):
        hpack.Decoder().decode(block)


def test_encoded_request_headers_decode_back() -> None:
    headers = fields(":method", "POST", ":scheme", "http", ":path", "/runtime.v1.RuntimeService/Version",
                     ":authority", "localhost", "content-type", "application/grpc", "te", "trailers",
                     "grpc-timeout", "120000m", "x-long", "v" * 300)
    block = hpack.encode(headers)
    assert block[:2] == b"\x83\x86"  # :method POST and :scheme http from the static table
    assert hpack.Decoder().decode(block) == headers


def test_a_block_read_again_reads_what_the_table_holds_now() -> None:
    # A decoder remembers the blocks it read while its table stays the same: a reference
    # to index 62 must read the newest entry after every change, never the remembered one.
    decoder = hpack.Decoder()
    decoder.decode(b"\x40\x01a\x01b")  # a: b, indexed at 62
    assert decoder.decode(b"\xbe") == [(b"a", b"b")]
    answer = decoder.decode(b"\xbe")
    assert answer == [(b"a", b"b")]
    answer.append((b"x", b"y"))  # what a caller does to its list stays its own
    assert decoder.decode(b"\xbe") == [(b"a", b"b")]
    decoder.decode(b"\x40\x01c\x01d")  # c: d is now 62
    assert decoder.decode(b"\xbe") == [(b"c", b"d")]
    decoder.decode(b"\x20")  # a size update to 0 empties the table
    with pytest.raises(hpack.HpackError):
        decoder.decode(b"\xbe")
