"""A gRPC server implementing grpc.health.v1.Health/Check by hand, in its own process (a
sync grpc server, with its slow "slow" answer on a thread pool, kept apart from the grpc.aio
client of the probe under test, which runs on the process's grpc loop).

    python -m tests.support.grpc_health_server [--no-health]   # prints the port, serves until killed

Service "" and "ok" serve, "down" does not, "slow" answers after 3 s, anything else is
NOT_FOUND (as grpc-go's health server). --no-health serves no service at all.
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent import futures
from contextlib import contextmanager
from typing import Iterator

import grpc


def _check(request: bytes, context: grpc.ServicerContext) -> bytes:
    service = request[2:].decode() if request else ""
    if service in ("", "ok"):
        return b"\x08\x01"
    if service == "down":
        return b"\x08\x02"
    if service == "slow":
        time.sleep(3)
        return b"\x08\x01"
    context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")


def main() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    if "--no-health" not in sys.argv:
        handler = grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(_check)}
        )
        server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


@contextmanager
def running(*args: str) -> Iterator[int]:
    """Start the server in a subprocess; its port; the process ends with the block."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.grpc_health_server", *args],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        yield int(process.stdout.readline())
    finally:
        process.kill()
        process.wait(timeout=10)


if __name__ == "__main__":
    main()
