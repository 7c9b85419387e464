"""The embedded runtime: a CRI v1 server (RuntimeService + ImageService) that runs each
container's command as a plain host process — no isolation, no images, like Nomad's
raw_exec — in a detached process of its own, so that its containers outlive the daemon.

The daemon calls `ensure_running(root_dir)` and talks to the returned endpoint with the
same CriClient it uses for containerd. The server side lives in `server`, `service` and
`runtime` and is only imported by the runtime process (`python -m pykubelet.embedded_runtime`).
"""

from .launcher import (
    EmbeddedRuntimeError,
    endpoint,
    ensure_running,
    is_running,
    log_path,
    runtime_pid,
    socket_path,
    stop,
)

__all__ = [
    "EmbeddedRuntimeError",
    "endpoint",
    "ensure_running",
    "is_running",
    "log_path",
    "runtime_pid",
    "socket_path",
    "stop",
]
