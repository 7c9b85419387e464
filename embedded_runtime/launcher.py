"""Starting and finding the embedded runtime, for the daemon (and tests).

ensure_running(root_dir) returns the CRI endpoint of the root dir's embedded runtime: the
live one when its socket accepts a connection, otherwise a new one started detached — its
own session, not a child of the caller, stdout and stderr appended to
<root_dir>/embedded-runtime/runtime.log — so that it and its containers outlive the daemon.
Nothing here imports grpc: the daemon calls it before anything else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT = 5.0  # seconds for a new runtime to serve on its socket
STOP_TIMEOUT = 5.0  # seconds stop() waits after SIGTERM before SIGKILL
_MAX_UNIX_PATH = 107  # sun_path holds 108 bytes including the terminating NUL


class EmbeddedRuntimeError(Exception):
    """The embedded runtime could not be started (the message names its log file)."""


def runtime_dir(root_dir: str | os.PathLike[str]) -> Path:
    return Path(root_dir).absolute() / "embedded-runtime"


def socket_path(root_dir: str | os.PathLike[str]) -> str:
    return str(runtime_dir(root_dir) / "runtime.sock")


def log_path(root_dir: str | os.PathLike[str]) -> str:
    return str(runtime_dir(root_dir) / "runtime.log")


def endpoint(root_dir: str | os.PathLike[str]) -> str:
    return f"unix://{socket_path(root_dir)}"


def is_running(root_dir: str | os.PathLike[str]) -> bool:
    """True when something accepts connections on the root dir's runtime socket."""
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(socket_path(root_dir))
        except OSError:
            return False
    return True


def ensure_running(root_dir: str) -> str:
    """The endpoint ("unix://<root_dir>/embedded-runtime/runtime.sock") of a live embedded
    runtime for root_dir, started if none answers. Blocks up to START_TIMEOUT seconds;
    raises EmbeddedRuntimeError naming the log file when the runtime does not come up."""
    path = socket_path(root_dir)
    if len(path.encode()) > _MAX_UNIX_PATH:
        raise EmbeddedRuntimeError(
            f"embedded runtime socket path {path} is {len(path.encode())} bytes, more than a "
            f"unix socket allows ({_MAX_UNIX_PATH}); use a shorter --root-dir"
        )
    if is_running(root_dir):
        return endpoint(root_dir)
    directory = runtime_dir(root_dir)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    log = log_path(root_dir)
    argv = [sys.executable, "-m", "pykubelet.embedded_runtime",
            "--root", str(Path(root_dir).absolute()), "--socket", path, "--detach"]
    with open(log, "ab") as log_file, open(os.devnull, "rb") as devnull:
        # The first process forks the runtime and exits once it serves (see __main__).
        starter = subprocess.Popen(
            argv, stdin=devnull, stdout=log_file, stderr=log_file,
            start_new_session=True, close_fds=True, cwd="/",
        )
    try:
        code = starter.wait(timeout=START_TIMEOUT)
    except subprocess.TimeoutExpired:
        starter.kill()
        starter.wait()
        code = None
    if is_running(root_dir):  # also when another caller's runtime won a race for the lock
        return endpoint(root_dir)
    outcome = "did not serve within %gs" % START_TIMEOUT if code is None else f"exited with code {code}"
    raise EmbeddedRuntimeError(
        f"embedded runtime for {root_dir} {outcome} on {path}; see its log {log}"
        + _log_tail(log)
    )


def _log_tail(log: str, lines: int = 5) -> str:
    try:
        tail = Path(log).read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return ("; last lines:\n" + "\n".join(tail)) if tail else ""


def runtime_pid(root_dir: str | os.PathLike[str]) -> int | None:
    """The pid of the root dir's runtime process (from its pid file), if it still runs."""
    try:
        pid = int((runtime_dir(root_dir) / "runtime.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if b"pykubelet.embedded_runtime" not in cmdline or _is_zombie(pid):
        return None
    return pid


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] in "ZX"


def stop(root_dir: str | os.PathLike[str], timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM the root dir's runtime and wait until it is gone (SIGKILL after `timeout`).
    Its containers keep running. False when no runtime ran."""
    pid = runtime_pid(root_dir)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, timeout)
    return True


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not _is_zombie(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
