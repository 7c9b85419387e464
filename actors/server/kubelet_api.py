"""What the kubelet API answers on --port (HTTPS, authenticated and authorized) and on
--read-only-port (HTTP, its read-only part, unauthenticated), as the Go kubelet's server
does: /healthz, /pods, /runningpods/, /configz, /metrics and, with
enableDebuggingHandlers, the container logs and the exec, attach and port-forward
streams (proxied to the runtime's streaming server)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from pykubelet.actors.health import HealthBoard
from pykubelet.messages.pod import PodList

from .http import Request, Response
from .routes import healthz

log = logging.getLogger("pykubelet.server.kubelet_api")

DEBUGGING_DISABLED = "Debug endpoints are disabled."
# Go's debugging handlers: everything that reads a container's output or runs in it.
_DEBUGGING = re.compile(r"^/(containerLogs|exec|attach|portForward|run|logs|debug|cri)(/|$)")
_READ_ONLY = re.compile(r"^/(healthz|pods|runningpods|metrics|stats|spec)(/|$)")


class Auth(Protocol):
    """actors/server/auth.KubeletAuth: who asks (None: 401) and may they (False: 403)."""

    async def check(self, request: Request) -> Response | None: ...


@dataclass(frozen=True)
class KubeletApiSources:
    """What the kubelet API reads; nothing here is owned by it."""

    health: HealthBoard
    metrics: CollectorRegistry
    pods: Callable[[], PodList]
    running_pods: Callable[[], list[dict[str, Any]]]
    configz: Mapping[str, Any]
    # The debugging handlers: path prefix -> handler (containerLogs, exec, attach, portForward, run).
    debugging: Mapping[str, Callable[[Request], Awaitable[Response]]] = field(default_factory=dict)
    # /stats/summary (actors/server/stats/provider.py, StatsProvider); None: not served.
    stats: Any = None


def kubelet_api(
    sources: KubeletApiSources,
    *,
    auth: Auth | None,
    enable_debugging_handlers: bool,
    read_only: bool = False,
) -> Callable[[Request], Awaitable[Response]]:
    """The handler of one kubelet API port: `auth` None only for the read-only port."""

    async def handle(request: Request) -> Response:
        path = request.path
        if read_only and not _READ_ONLY.match(path):
            return Response.text(404, "404 page not found\n")
        if auth is not None:
            refusal = await auth.check(request)
            if refusal is not None:
                return refusal
        if _DEBUGGING.match(path):
            if not enable_debugging_handlers or read_only:
                return Response.text(405, DEBUGGING_DISABLED + "\n")
            prefix = path.split("/", 2)[1]
            handler = sources.debugging.get(prefix)
            if handler is None:
                return Response.text(404, f"404 page not found ({path}: not served by pykubelet yet)\n")
            return await handler(request)
        if path.rstrip("/") == "/stats/summary" and sources.stats is not None:
            return await sources.stats.summary(request)
        if path == "/metrics/resource" and sources.stats is not None:
            return await sources.stats.resource_metrics(request)
        return _read(sources, request)

    return handle


def _read(sources: KubeletApiSources, request: Request) -> Response:
    path = request.path
    if request.method not in ("GET", "HEAD"):
        return Response.text(405, f"method {request.method} not allowed on {path}\n")
    if path in ("/healthz", "/healthz/"):
        return healthz(sources.health, request)
    if path == "/healthz/ping":
        return Response.text(200, "ok")
    if path.startswith("/healthz/"):
        name = path.removeprefix("/healthz/")
        check = next((c for c in sources.health.checks() if c.name == name), None)
        if check is None:
            return Response.text(404, f"404 page not found (no health check {name!r})\n")
        return Response.text(200, "ok") if check.ok else Response.text(500, f"[-]{check.name} failed: {check.detail}\n")
    if path == "/pods" or path == "/pods/":
        return Response.json(200, msgspec.json.encode(sources.pods()))
    if path == "/runningpods" or path == "/runningpods/":
        items = sources.running_pods()
        return Response.json(200, json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}).encode())
    if path == "/configz":
        return Response.json(200, json.dumps({"kubeletconfig": sources.configz}).encode())
    if path == "/metrics":
        return Response(200, generate_latest(sources.metrics), CONTENT_TYPE_LATEST)
    if path == "/metrics/probes":
        return Response(200, _only(generate_latest(sources.metrics), b"prober_"), CONTENT_TYPE_LATEST)
    return Response.text(404, "404 page not found\n")


def _only(text: bytes, prefix: bytes) -> bytes:
    """The metric families whose names start with `prefix`, from Prometheus text."""
    out, keep = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith(b"# HELP ") or line.startswith(b"# TYPE "):
            keep = line.split(b" ", 3)[2].startswith(prefix)
        elif not line.startswith(b"#"):
            keep = line.startswith(prefix)
        if keep:
            out.append(line)
    return b"".join(out)


def running_pods_from(relist: Any) -> list[dict[str, Any]]:
    """Go's /runningpods/: the pods the runtime holds, each with its running containers,
    as Pod objects with only metadata and container names."""
    if relist is None:
        return []
    pods: dict[str, dict[str, Any]] = {}
    for sandbox in relist.sandboxes:
        pods.setdefault(sandbox.pod_uid, {
            "metadata": {"name": sandbox.name, "namespace": sandbox.namespace, "uid": sandbox.pod_uid},
            "spec": {"containers": []}, "status": {},
        })
    for container in relist.containers:
        pod = pods.get(container.pod_uid)
        if pod is not None and container.state == "running":
            pod["spec"]["containers"].append({"name": container.name, "resources": {}})
    return sorted(pods.values(), key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
