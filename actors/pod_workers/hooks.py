"""Lifecycle hooks (Go: pkg/kubelet/lifecycle/handlers.go): postStart right after a
container starts, preStop before it is sent SIGTERM, each an exec (CRI ExecSync), an
httpGet or a sleep. A failed postStart kills the container (FailedPostStartHook); a failed
preStop is reported (FailedPreStopHook) and the stop goes on.
"""

from __future__ import annotations

import ipaddress

import msgspec
import trio

from pykubelet.messages.pod import Container, LifecycleHandler
from pykubelet.ports.cri import CommandTimedOut, CriClient, CriError


class HookFailed(Exception):
    pass


def prestop_handler(container: Container | None, annotation: str) -> LifecycleHandler | None:
    """The spec's preStop handler, or the one recorded on the container (after a restart
    of the kubelet, the spec may be gone)."""
    if container is not None and container.lifecycle is not None:
        return container.lifecycle.pre_stop
    if annotation:
        try:
            return msgspec.json.decode(annotation, type=LifecycleHandler)
        except msgspec.DecodeError:
            return None
    return None


async def run_hook(
    cri: CriClient, handler: LifecycleHandler, container_id: str, *, host: str, ports: dict[str, int], timeout: float
) -> None:
    """Run one handler within `timeout` seconds; HookFailed says why it failed."""
    if handler.exec is not None:
        if not handler.exec.command:
            raise HookFailed("exec: command is empty")
        try:
            result = await cri.exec_sync(container_id, handler.exec.command, timeout)
        except CommandTimedOut:
            raise HookFailed(f"exec {handler.exec.command}: timed out after {timeout:g}s") from None
        except CriError as exc:
            raise HookFailed(f"exec {handler.exec.command}: {exc}") from None
        if result.exit_code != 0:
            output = (result.stdout + result.stderr).decode(errors="replace").strip()[-512:]
            raise HookFailed(f"exec {handler.exec.command}: exit code {result.exit_code}: {output}")
        return
    if handler.http_get is not None:
        action = handler.http_get
        target = action.host or host
        try:
            ipaddress.ip_address(target)
        except ValueError:
            raise HookFailed(f"httpGet: host {target!r} is not an IP address (no name lookups)") from None
        port = action.port if isinstance(action.port, int) else ports.get(action.port, 0)
        if not port:
            raise HookFailed(f"httpGet: port {action.port!r} not found in the container's ports")
        url = f"{action.scheme.lower()}://{target}:{port}/{action.path.lstrip('/')}"
        headers = {h.name: h.value for h in action.http_headers}
        import httpx  # on the first httpGet hook: a node without one never loads it

        try:
            async with httpx.AsyncClient(timeout=timeout, verify=False) as client:
                response = await client.get(url, headers=headers)
        except httpx.HTTPError as exc:
            raise HookFailed(f"httpGet {url}: {type(exc).__name__}: {exc}") from None
        if not 200 <= response.status_code < 400:
            raise HookFailed(f"httpGet {url}: HTTP {response.status_code}")
        return
    if handler.sleep is not None:
        await trio.sleep(min(handler.sleep.seconds, timeout))
        return
    raise HookFailed("no supported handler (exec, httpGet or sleep)")


def ports_by_name(container: Container | None) -> dict[str, int]:
    """A container's named ports, for a hook's httpGet or tcpSocket port given by name."""
    return {p.name: p.container_port for p in container.ports if p.name} if container is not None else {}
