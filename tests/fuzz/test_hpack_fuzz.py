"""The HPACK decoder of one connection, fed a server's header blocks in any order: blocks
that add to the dynamic table, resize it, reference it (in range or past it) and repeat.
A decoder remembers the blocks it read while its table stayed the same; every block must
read exactly as a decoder in the same state that remembers nothing reads it, errors
included."""

from __future__ import annotations

import copy

from hypothesis import given, strategies as st

from pykubelet.ports.grpc_client import hpack

from .support import tried, valid

# Representations (RFC 7541 6): few enough that blocks repeat, varied enough that the
# table fills, evicts, empties and is referenced past its end.
PIECES = [
    b"\x88",  # :status: 200, static
    b"\xbe", b"\xbf", b"\xc0",  # dynamic 62-64: the newest entries, or past the table
    b"\x40\x01a\x01b", b"\x40\x0ccontent-type\x10application/grpc",  # literals added to the table
    b"\x5f\x00\x10application/grpc",  # literal added, name from the static table (31: content-type)
    b"\x00\x0bgrpc-status\x010", b"\x10\x0cgrpc-message\x02ok",  # literals kept out of the table
    b"\x20", b"\x3f\x21", b"\x3f\xe1\x1f",  # size updates to 0, 64 and 4096 (valid at a block's start)
]
blocks = st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map(b"".join)


@given(st.lists(st.sampled_from(range(8)), min_size=1, max_size=40), st.lists(blocks, min_size=8, max_size=8))
def test_a_block_read_again_reads_as_a_decoder_that_remembers_nothing(order, chosen):
    tried("hpack")
    decoder = hpack.Decoder()
    for index in order:
        block = chosen[index]
        fresh = copy.deepcopy(decoder)
        fresh._known.clear()  # the same table, nothing remembered
        try:
            expected = fresh.decode(block)
        except hpack.HpackError:
            try:
                decoder.decode(block)
            except hpack.HpackError:
                return  # the connection ends here
            raise AssertionError(f"{block!r} read though a decoder in the same state refuses it")
        assert decoder.decode(block) == expected
        assert decoder._entries == fresh._entries and decoder.table_size == fresh.table_size
    valid("hpack")
