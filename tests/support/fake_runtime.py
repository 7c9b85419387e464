"""A hand-written CRI RuntimeService (a grpc.aio servicer) served on a unix socket of its
own, on the process's grpc loop, for tests of the CRI port against runtimes that misbehave
(hang, stream forever)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator

import grpc
from cri_api.v1 import api_pb2_grpc

from tests.support import grpc_loop


@contextlib.asynccontextmanager
async def serve_runtime(servicer: api_pb2_grpc.RuntimeServiceServicer) -> AsyncIterator[str]:
    """Serve `servicer` until the block ends; yields the socket's path."""
    directory = tempfile.mkdtemp(prefix="pykt-rt-", dir="/tmp")
    path = os.path.join(directory, "cri.sock")

    async def start_server() -> grpc.aio.Server:
        server = grpc.aio.server()
        api_pb2_grpc.add_RuntimeServiceServicer_to_server(servicer, server)
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        return server

    server = await grpc_loop.run(start_server)
    try:
        yield path
    finally:
        await grpc_loop.run(server.stop, None)
        shutil.rmtree(directory, ignore_errors=True)
