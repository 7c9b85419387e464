"""Termination messages (Go: kuberuntime getTerminationMessage): a file the kubelet makes
for each container attempt and mounts at terminationMessagePath; when the container has
exited, its content (or, under FallbackToLogsOnError after a failure, the tail of its log)
becomes the message of its terminated state."""

from __future__ import annotations

import os

import msgspec

from pykubelet.messages.pod import Container, Pod
from pykubelet.messages.runtime import ContainerRuntimeStatus, PodRuntimeStatus
from pykubelet.pods.runtime_config import pod_log_directory

MAX_MESSAGE_BYTES = 4096  # the Go kubelet's limit for the file
FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES = 80, 2048  # and for the log tail


def message_file(root_dir: str, pod: Pod, container: str, restart_count: int) -> str:
    return os.path.join(root_dir, "pods", pod.metadata.uid, "containers", container, str(restart_count))


def prepare(root_dir: str, pod: Pod, container: Container, restart_count: int) -> str | None:
    """Create the empty, world-writable file a container attempt writes its message to."""
    if not container.termination_message_path:
        return None
    path = message_file(root_dir, pod, container.name, restart_count)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w"):
        pass
    os.chmod(path, 0o666)
    return path


def with_messages(pod: Pod, runtime: PodRuntimeStatus, *, root_dir: str, pod_logs_dir: str) -> PodRuntimeStatus:
    """The runtime status with each exited container's termination message filled in."""
    specs = {c.name: c for c in [*pod.spec.init_containers, *pod.spec.containers]}
    containers = [
        _with_message(c, specs.get(c.name), pod, root_dir, pod_logs_dir) if c.state == "exited" and not c.message else c
        for c in runtime.containers
    ]
    return msgspec.structs.replace(runtime, containers=containers)


def _with_message(
    status: ContainerRuntimeStatus, spec: Container | None, pod: Pod, root_dir: str, pod_logs_dir: str
) -> ContainerRuntimeStatus:
    message = _read_tail(message_file(root_dir, pod, status.name, status.restart_count), MAX_MESSAGE_BYTES)
    if not message and spec is not None and spec.termination_message_policy == "FallbackToLogsOnError" and status.exit_code:
        log_path = os.path.join(pod_log_directory(pod_logs_dir, pod), status.name, f"{status.restart_count}.log")
        message = _log_tail(log_path)
    return msgspec.structs.replace(status, message=message) if message else status


def _read_tail(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - limit))
            return file.read().decode(errors="replace")
    except OSError:
        return ""


def _log_tail(path: str) -> str:
    """The last lines of a CRI log file, without the CRI prefixes."""
    lines = _read_tail(path, 64 * 1024).splitlines()[-FALLBACK_LOG_LINES:]
    text = "\n".join(line.split(" ", 3)[3] if line.count(" ") >= 3 else line for line in lines)
    return text[-FALLBACK_LOG_BYTES:]
