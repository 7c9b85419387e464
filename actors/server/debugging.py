"""The kubelet API's debugging handlers (Go: InstallDebuggingHandlers): /containerLogs,
/exec, /attach, /portForward and /run. Exec, attach and port-forward ask the runtime for a
streaming URL (CRI Exec/Attach/PortForward) and proxy the upgraded connection to it byte
for byte (ports/upgrade_proxy.py); the stream protocols are the runtime's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod import Pod, PodList
from pykubelet.pods.kubelet_auth import without_websocket_bearer_token
from pykubelet.pods.labels import POD_UID_LABEL
from pykubelet.ports.cri import CriError, CriNotFound

from .http import Request, Response

log = logging.getLogger("pykubelet.server.debugging")

RUN_TIMEOUT = 60.0  # /run has no timeout parameter; a hung command must not hold the request


class NotFound(Exception):
    """404 with the Go kubelet's message."""


@dataclass(frozen=True)
class Target:
    pod: Pod
    container_id: str  # "" for port-forward
    sandbox_id: str


class DebuggingHandlers:
    """Finds the pod and container a request names: the container from the pod's status
    (published as soon as it starts), a port-forward's sandbox from the PLEG's last relist or,
    when it is newer than that, from the runtime."""

    def __init__(
        self, *, runtime: RuntimeHandle, pods: Callable[[], PodList], relist: Callable[[], Any], pod_logs_dir: str,
    ) -> None:
        self.runtime = runtime
        self.pods = pods
        self.relist = relist
        self.pod_logs_dir = pod_logs_dir

    def handlers(self) -> dict[str, Callable[[Request], Any]]:
        return {
            "containerLogs": self.container_logs, "exec": self.exec, "attach": self.attach,
            "portForward": self.port_forward, "run": self.run,
        }

    # -- lookups ---------------------------------------------------------------------------

    def _target(self, parts: list[str], *, container: bool) -> Target:
        """{namespace}/{pod}[/{uid}]/{container} (or without the container for port-forward)."""
        if container and len(parts) not in (3, 4) or not container and len(parts) not in (2, 3):
            raise NotFound("404 page not found")
        namespace, name = parts[0], parts[1]
        uid = parts[2] if len(parts) == (4 if container else 3) else ""
        pod = next(
            (p for p in self.pods().items if p.metadata.namespace == namespace and p.metadata.name == name
             and (not uid or p.metadata.uid == uid)),
            None,
        )
        if pod is None:
            raise NotFound("pod does not exist")
        relist = self.relist()
        sandboxes = [s for s in (relist.sandboxes if relist else []) if s.pod_uid == pod.metadata.uid and s.ready]
        sandbox_id = sandboxes[0].id if sandboxes else ""
        if not container:
            return Target(pod=pod, container_id="", sandbox_id=sandbox_id)  # "": not relisted yet
        # The container as the pod's status shows it: published by its worker right after
        # it started, sooner than the next relist.
        container_name = parts[-1]
        status = next((c for c in [*pod.status.init_container_statuses, *pod.status.container_statuses]
                       if c.name == container_name), None)
        if status is None or status.state.running is None or not status.container_id:
            raise NotFound(f'container not found ("{container_name}")')
        return Target(pod=pod, container_id=status.container_id.split("://", 1)[-1], sandbox_id=sandbox_id)

    def _pod(self, namespace: str, name: str) -> Pod:
        pod = next((p for p in self.pods().items if p.metadata.namespace == namespace and p.metadata.name == name), None)
        if pod is None:
            raise NotFound(f'pod "{name}" not found')
        return pod

    # -- handlers -----------------------------------------------------------------------------

    async def container_logs(self, request: Request) -> Response:
        """Go's getContainerLogs: the container's CRI log file, formatted for the client,
        optionally followed until the container stops."""
        parts = _parts(request, "containerLogs")
        if len(parts) != 3:
            return Response.text(400, f'Container name not specified: "{request.path}"\n')
        namespace, name, container = parts
        # Imported by the first request for logs: a kubelet nobody asks never loads them.
        from pykubelet.pods.container_logs import LogOptionsError, parse_log_options
        from pykubelet.ports.container_log_reader import container_log_path, previous_log_path, stream_container_log

        try:
            options = parse_log_options(request.query)
        except LogOptionsError as exc:
            return Response.text(exc.status, f"{exc}\n")
        try:
            pod = self._pod(namespace, name)
        except NotFound as exc:
            return Response.text(404, f"{exc}\n")
        status = next((c for c in [*pod.status.init_container_statuses, *pod.status.container_statuses]
                       if c.name == container), None)
        if status is None:
            return Response.text(404, f'container "{container}" in pod "{name}" is not available\n')
        meta = pod.metadata
        if options.previous:
            path = previous_log_path(self.pod_logs_dir, namespace, meta.name, meta.uid, container, status.restart_count)
            if path is None:
                return Response.text(400, f'previous terminated container "{container}" in pod "{name}" not found\n')
        else:
            path = container_log_path(self.pod_logs_dir, namespace, meta.name, meta.uid, container, status.restart_count)
        if not os.path.exists(path):
            return Response.text(404, f'container "{container}" in pod "{name}" has no log yet\n')
        container_id = status.container_id.split("://", 1)[-1]

        def stopped() -> bool:
            # As the pod's status shows it (its worker publishes a container's end when the
            # PLEG reports it): the follow ends when this attempt no longer runs.
            if options.previous:
                return True
            now = next((p for p in self.pods().items if p.metadata.uid == meta.uid), None)
            statuses = [*now.status.init_container_statuses, *now.status.container_statuses] if now else []
            return not any(c.container_id.endswith(container_id) and c.state.running is not None for c in statuses)

        async def produce(send) -> None:
            await stream_container_log(path, options, send, stop_following=stopped)

        return Response(200, content_type="text/plain", stream=produce)


    async def exec(self, request: Request) -> Response:
        parts = _parts(request, "exec")
        try:
            target = self._target(parts, container=True)
        except NotFound as exc:
            return Response.text(404, f"{exc}\n")
        command = request.query.get("command", [])
        if not command:
            return Response.text(400, "you must specify at least 1 command\n")
        options = _stream_options(request)
        if options is None:
            return Response.text(400, "you must specify at least 1 of stdin, stdout, stderr\n")
        stdin, stdout, stderr, tty = options
        return await self._proxy(request, lambda cri: cri.exec(
            target.container_id, command, stdin=stdin, stdout=stdout, stderr=stderr and not tty, tty=tty))

    async def attach(self, request: Request) -> Response:
        parts = _parts(request, "attach")
        try:
            target = self._target(parts, container=True)
        except NotFound as exc:
            return Response.text(404, f"{exc}\n")
        options = _stream_options(request)
        if options is None:
            return Response.text(400, "you must specify at least 1 of stdin, stdout, stderr\n")
        stdin, stdout, stderr, tty = options
        return await self._proxy(request, lambda cri: cri.attach(
            target.container_id, stdin=stdin, stdout=stdout, stderr=stderr and not tty, tty=tty))

    async def port_forward(self, request: Request) -> Response:
        parts = _parts(request, "portForward")
        try:
            target = self._target(parts, container=False)
        except NotFound as exc:
            return Response.text(404, f"{exc}\n")
        try:
            ports = [int(p) for value in request.query.get("ports", []) for p in value.split(",") if p]
        except ValueError:
            return Response.text(400, "ports: each must be a number between 1 and 65535\n")
        if any(not 0 < p < 65536 for p in ports):
            return Response.text(400, "ports: each must be a number between 1 and 65535\n")
        sandbox_id = target.sandbox_id or await self._ready_sandbox(target.pod)
        if not sandbox_id:
            return Response.text(404, f"pod {target.pod.metadata.name} has no running sandbox\n")
        return await self._proxy(request, lambda cri: cri.port_forward(sandbox_id, ports))

    async def _ready_sandbox(self, pod: Pod) -> str:
        """The pod's ready sandbox as the runtime has it now: one started since the last
        relist (up to a relist period ago) is not in the PLEG's view yet (Go asks the
        runtime on every port-forward)."""
        selector = api_pb2.PodSandboxFilter(
            state=api_pb2.PodSandboxStateValue(state=api_pb2.SANDBOX_READY),
            label_selector={POD_UID_LABEL: pod.metadata.uid},
        )
        try:
            sandboxes = await self.runtime.client.list_pod_sandbox(selector)
        except CriError as exc:
            log.warning("port-forward: cannot list the sandboxes of pod %s: %s", pod.metadata.name, exc)
            return ""
        return sandboxes[0].id if sandboxes else ""

    async def run(self, request: Request) -> Response:
        """Go's /run: ExecSync of the `cmd` query parameter (split on spaces), the output as
        the answer."""
        if request.method != "POST":
            return Response.text(405, "method not allowed: /run takes POST\n")
        parts = _parts(request, "run")
        try:
            target = self._target(parts, container=True)
        except NotFound as exc:
            return Response.text(404, f"{exc}\n")
        command = " ".join(request.query.get("cmd", [])).split()
        if not command:
            return Response.text(400, "cmd: required\n")
        try:
            result = await self.runtime.client.exec_sync(target.container_id, command, RUN_TIMEOUT)
        except CriNotFound:
            return Response.text(404, 'container not found\n')
        except CriError as exc:
            return Response.text(500, f"{exc}\n")
        return Response(200, result.stdout + result.stderr)

    async def _proxy(self, request: Request, streaming_url) -> Response:
        # Imported by the first exec, attach or port-forward: a kubelet nobody asks never loads it.
        from pykubelet.ports.upgrade_proxy import proxy_upgrade, streaming_url_is_local

        try:
            url = await streaming_url(self.runtime.client)
        except CriNotFound as exc:
            return Response.text(404, f"{exc}\n")
        except CriError as exc:
            return Response.text(500, f"{exc}\n")
        if not streaming_url_is_local(url):
            return Response.text(500, f"the runtime's streaming server {url} is not on a loopback address\n")

        async def take_over(stream: trio.abc.Stream, already: bytes) -> None:
            await proxy_upgrade(stream, method=request.method, target_url=url,
                                raw_headers=without_websocket_bearer_token(request.raw_headers), already_read=already)

        return Response(0, upgrade=take_over)


def _parts(request: Request, prefix: str) -> list[str]:
    return [p for p in request.path.removeprefix(f"/{prefix}/").split("/") if p]


def _flag(request: Request, *names: str) -> bool:
    return any(v.lower() in ("1", "true") for name in names for v in request.query.get(name, []))


def _stream_options(request: Request) -> tuple[bool, bool, bool, bool] | None:
    """stdin, stdout, stderr, tty as Go's remotecommand reads them (input/output/error are
    the old names); None when no stream is asked for."""
    stdin = _flag(request, "stdin", "input")
    stdout = _flag(request, "stdout", "output")
    stderr = _flag(request, "stderr", "error")
    tty = _flag(request, "tty")
    if not (stdin or stdout or stderr):
        return None
    return stdin, stdout, stderr, tty
