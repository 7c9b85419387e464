"""The HTTP server's two ways past a plain body: a chunked stream written piece by piece,
and a connection handed over after the request head (the upgrade proxy's way in)."""

from __future__ import annotations

import trio
import trio.testing

from pykubelet.actors.server.http import Request, Response, serve_connection


async def exchange(handler, request: bytes, *, then: bytes = b"") -> bytes:
    client, server = trio.testing.memory_stream_pair()
    received = bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_connection, server, handler)
        await client.send_all(request + then)
        with trio.move_on_after(1):
            while data := await client.receive_some(65536):
                received += data
        nursery.cancel_scope.cancel()
    return bytes(received)


async def test_a_streamed_body_arrives_in_chunks_in_order(autojump_clock):
    async def handler(request: Request) -> Response:
        async def produce(send):
            for n in range(3):
                await send(f"line {n}\n".encode())
                await trio.sleep(0.1)

        return Response(200, stream=produce)

    answer = await exchange(handler, b"GET /logs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert body == b"7\r\nline 0\n\r\n7\r\nline 1\n\r\n7\r\nline 2\n\r\n0\r\n\r\n"


async def test_an_upgrade_gets_the_connection_and_what_followed_the_head(autojump_clock):
    seen: dict = {}

    async def handler(request: Request) -> Response:
        async def take_over(stream, already: bytes) -> None:
            seen["already"] = already
            seen["head"] = (request.method, request.target, dict(request.raw_headers)[b"Upgrade"])
            await stream.send_all(b"HTTP/1.1 101 Switching Protocols\r\n\r\nhello")

        return Response(0, upgrade=take_over)

    answer = await exchange(
        handler,
        b"POST /exec/ns/pod/c?command=sh HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n",
        then=b"early bytes",
    )
    assert answer == b"HTTP/1.1 101 Switching Protocols\r\n\r\nhello"
    assert seen == {"already": b"early bytes", "head": ("POST", "/exec/ns/pod/c?command=sh", b"SPDY/3.1")}


async def test_a_kept_alive_connection_holds_no_answer_while_it_waits_for_the_next_request(autojump_clock):
    # /pods with 110 pods is 245 kB: a client that keeps its connection must not pin it.
    import gc
    import weakref

    answers: list[weakref.ref] = []

    async def handler(request: Request) -> Response:
        response = Response(200, b"x" * 1000)
        answers.append(weakref.ref(response))
        return response

    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_connection, server, handler)
        await client.send_all(b"GET /pods HTTP/1.1\r\nHost: x\r\n\r\n")
        received = bytearray()
        while not received.endswith(b"x" * 1000):
            received += await client.receive_some(65536)
        await trio.sleep(0.1)  # the server is back waiting for the next request
        gc.collect()
        assert answers[0]() is None
        nursery.cancel_scope.cancel()
