"""The embedded runtime process: one per root dir (a lock file makes sure), serving CRI v1
with grpc.aio on a unix socket until SIGTERM or SIGINT.

Stopping the runtime stops no container (as with containerd): they run on, and the next
runtime process adopts them from the state records.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import grpc
from cri_api.v1 import api_pb2_grpc

from .records import RUNNING
from .runtime import EmbeddedRuntime
from .service import ImageService, RuntimeService, runtime_version

log = logging.getLogger("pykubelet.embedded_runtime")

STARTUP_WARNING = (
    "the embedded runtime runs each container's command as a plain host process WITHOUT "
    "isolation (no namespaces, no cgroups, no image filesystem, host network only) and pulls "
    "no images; use containerd (--container-runtime-endpoint) where that matters"
)
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # as containerd's CRI server
SHUTDOWN_GRACE_SECONDS = 1.0


class AlreadyRunning(Exception):
    """Another embedded runtime process holds this root dir."""


def runtime_dir(root_dir: str | os.PathLike[str]) -> Path:
    return Path(root_dir) / "embedded-runtime"


def _lock(directory: Path) -> int:
    fd = os.open(directory / "runtime.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AlreadyRunning(f"another embedded runtime process holds {directory / 'runtime.lock'}") from None
    return fd


def _socket_answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


async def serve(root_dir: str, socket_path: str, on_ready: Callable[[], None] = lambda: None) -> None:
    directory = runtime_dir(root_dir)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock_fd = _lock(directory)  # held until the process ends
    pid_file = directory / "runtime.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    log.warning(STARTUP_WARNING)
    log.info("pykubelet-embedded %s starting: root %s, socket %s", runtime_version(), directory, socket_path)

    if _socket_answers(socket_path):
        raise AlreadyRunning(f"something already answers on {socket_path}")
    runtime = EmbeddedRuntime(directory)
    runtime.recover()
    log.info("state loaded: %d sandboxes, %d containers (%d running)", len(runtime.sandboxes),
             len(runtime.containers),
             sum(1 for c in runtime.containers.values() if c.record.state == RUNNING))
    Path(socket_path).unlink(missing_ok=True)  # a stale socket of a runtime that died
    Path(socket_path).parent.mkdir(parents=True, exist_ok=True)
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ])
    api_pb2_grpc.add_RuntimeServiceServicer_to_server(RuntimeService(runtime), server)
    api_pb2_grpc.add_ImageServiceServicer_to_server(ImageService(runtime), server)
    old_umask = os.umask(0o177)  # the socket is born 0600: it runs anything as this user
    try:
        if server.add_insecure_port(f"unix://{socket_path}") == 0:
            raise OSError(f"cannot listen on unix socket {socket_path}")
    finally:
        os.umask(old_umask)
    await server.start()
    log.info("serving CRI v1 on unix://%s", socket_path)
    on_ready()

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()
    log.info("stopping on signal; containers keep running")
    await server.stop(SHUTDOWN_GRACE_SECONDS)
    Path(socket_path).unlink(missing_ok=True)
    pid_file.unlink(missing_ok=True)
    os.close(lock_fd)
