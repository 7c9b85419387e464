"""HPACK's Huffman code: the codes derived from the lengths are the RFC's, and strings
decode as RFC 7541's examples say."""

from __future__ import annotations

import pytest

from pykubelet.ports.grpc_client import huffman

# (symbol, code, length) as RFC 7541 Appendix B lists them.
RFC_CODES = [
    (0, 0x1FF8, 13), (1, 0x7FFFD8, 23), (9, 0xFFFFEA, 24), (10, 0x3FFFFFFC, 30),
    (ord(" "), 0x14, 6), (ord("0"), 0x0, 5), (ord("a"), 0x3, 5), (ord("A"), 0x21, 6),
    (ord("z"), 0x7B, 7), (ord("~"), 0x1FFD, 13), (255, 0x3FFFFEE, 26), (huffman.EOS, 0x3FFFFFFF, 30),
]


@pytest.mark.parametrize(("symbol", "code", "length"), RFC_CODES)
def test_codes_derived_from_the_lengths_are_the_rfc_codes(symbol, code, length) -> None:
    assert huffman.CODES[symbol] == code
    assert huffman._LENGTHS[symbol] == length


# RFC 7541 C.4: the Huffman-coded strings of its request examples.
RFC_STRINGS = [
    (b"www.example.com", "f1e3c2e5f23a6ba0ab90f4ff"),
    (b"no-cache", "a8eb10649cbf"),
    (b"custom-key", "25a849e95ba97d7f"),
    (b"custom-value", "25a849e95bb8e8b4bf"),
]


@pytest.mark.parametrize(("text", "coded"), RFC_STRINGS)
def test_rfc_examples_decode_and_encode(text, coded) -> None:
    assert huffman.decode(bytes.fromhex(coded)) == text
    assert huffman.encode(text).hex() == coded


def test_every_octet_round_trips() -> None:
    every = bytes(range(256)) * 2
    assert huffman.decode(huffman.encode(every)) == every


def test_padding_that_is_not_the_start_of_eos_is_refused() -> None:
    coded = bytearray(huffman.encode(b"a"))  # 00011 + 111 padding
    coded[-1] &= 0xFE
    with pytest.raises(huffman.HuffmanError):
        huffman.decode(bytes(coded))


def test_a_whole_octet_of_padding_is_refused() -> None:
    with pytest.raises(huffman.HuffmanError):
        huffman.decode(huffman.encode(b"0") + b"\xff")  # 00000111 then 8 more ones


def test_eos_inside_a_string_is_refused() -> None:
    with pytest.raises(huffman.HuffmanError):
        huffman.decode(b"\xff\xff\xff\xff")  # EOS's 30 ones, then padding
