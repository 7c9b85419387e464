"""HPACK's Huffman code (RFC 7541 Appendix B): decoding the header strings a gRPC server
sends Huffman-coded (grpc-go and grpc-core both do, whenever it is shorter).

The code is canonical: each symbol's code follows from the code lengths alone (codes of
one length are consecutive, in symbol order, and each length starts where the previous
one ended, shifted left). So the table below is the lengths, 256 octets and EOS; the codes
are derived at import and checked against the RFC's in tests/unit/ports/grpc_client.
"""

from __future__ import annotations

# Code length in bits of symbols 0..255 and EOS (256), sixteen a row.
_LENGTHS = (
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
    30,
)
EOS = 256


class HuffmanError(ValueError):
    """A Huffman-coded string that RFC 7541 forbids: EOS inside it, or bad padding."""


def canonical_codes(lengths: tuple[int, ...] = _LENGTHS) -> list[int]:
    """Each symbol's code (as an integer of its length's bits), derived from the lengths."""
    codes = [0] * len(lengths)
    code = 0
    previous = 0
    for length, symbol in sorted((length, symbol) for symbol, length in enumerate(lengths)):
        code <<= length - previous
        codes[symbol] = code
        code += 1
        previous = length
    return codes


CODES = canonical_codes()
# (length, code) -> symbol: looked up once a code's bits are read, one length at a time.
_SYMBOLS = {(length, code): symbol for symbol, (length, code) in enumerate(zip(_LENGTHS, CODES))}
_SHORTEST = min(_LENGTHS)


def decode(data: bytes) -> bytes:
    """The octets a Huffman-coded string stands for."""
    out = bytearray()
    code = 0
    length = 0
    symbols = _SYMBOLS
    for octet in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((octet >> shift) & 1)
            length += 1
            if length < _SHORTEST:
                continue
            symbol = symbols.get((length, code))
            if symbol is None:
                if length > 30:
                    raise HuffmanError("no Huffman code matches the bits")
                continue
            if symbol == EOS:
                raise HuffmanError("EOS inside a Huffman-coded string")
            out.append(symbol)
            code = 0
            length = 0
    # What is left must be padding: fewer than 8 bits, all ones (the start of EOS).
    if length > 7 or code != (1 << length) - 1:
        raise HuffmanError("a Huffman-coded string is not padded with the start of EOS")
    return bytes(out)


def encode(data: bytes) -> bytes:
    """The Huffman coding of `data`, padded with ones (what a peer's encoder sends)."""
    bits = 0
    count = 0
    for octet in data:
        bits = (bits << _LENGTHS[octet]) | CODES[octet]
        count += _LENGTHS[octet]
    padding = -count % 8
    bits = (bits << padding) | ((1 << padding) - 1)
    return (bits.to_bytes((count + padding) // 8, "big")) if count else b""
