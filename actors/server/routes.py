"""What the healthz port and the admin socket answer (see docs/operations.md).

healthz: GET /healthz. Admin socket: GET /healthz, /metrics, /pods, /events (?namespace=,
?uid=), /debug/actors and POST /debug/actors/{path}/restart|crash; GET /containerLogs/... and
POST /run/... through the kubelet API's debugging handlers (pykubelet-inspect logs and exec).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Awaitable, Callable

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from pykubelet.actors.health import HealthBoard
from pykubelet.messages.events import Event, EventList
from pykubelet.messages.pod import PodList, pod_list
from pykubelet.supervisor import NotRunning, Supervisor

from .http import Request, Response

_ACTOR_ACTION = re.compile(r"^/debug/actors/(?P<path>.+)/(?P<action>restart|crash)$")
# The debugging handlers the admin socket serves, and the method each takes. Not exec,
# attach or portForward: they upgrade to SPDY or WebSocket streams, which
# pykubelet-inspect does not speak.
_DEBUGGING = re.compile(r"^/(?P<prefix>containerLogs|run)(/|$)")
_DEBUGGING_METHODS = {"containerLogs": "GET", "run": "POST"}


def no_events(namespace: str | None = None, involved_uid: str | None = None) -> list[Event]:
    return []


def event_list(events: list[Event]) -> bytes:
    """An EventList as the API serves one (events oldest first)."""
    return msgspec.json.encode(EventList(items=events))


def healthz(health: HealthBoard, request: Request) -> Response:
    """200 "ok", or 500 naming each failing check; ?verbose lists every check."""
    verbose = "verbose" in request.query
    failing = health.failing()
    if not failing and not verbose:
        return Response.text(200, "ok")
    lines = [
        f"[+]{c.name} ok: {c.detail}" if c.ok else f"[-]{c.name} failed: {c.detail}"
        for c in (health.checks() if verbose else failing)
    ]
    lines.append("healthz check failed" if failing else "healthz check passed")
    return Response.text(500 if failing else 200, "\n".join(lines) + "\n")


def healthz_routes(health: HealthBoard) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        if request.path == "/healthz" and request.method in ("GET", "HEAD"):
            return healthz(health, request)
        return Response.text(404, f"not found: {request.path}; this port serves /healthz\n")

    return handle


class AdminRoutes:
    def __init__(
        self,
        *,
        tree: Callable[[], Supervisor],
        health: HealthBoard,
        metrics: CollectorRegistry,
        fault_injection: bool,
        own_path: str,
        pods: Callable[[], PodList] = lambda: pod_list([]),
        events: Callable[..., list[Event]] = no_events,  # EventRecorder.events
        # DebuggingHandlers.handlers(): the socket serves containerLogs and run from it.
        debugging: Mapping[str, Callable[[Request], Awaitable[Response]]] = {},
    ) -> None:
        self._tree = tree
        self._debugging = debugging
        self._pods = pods
        self._events = events
        self._health = health
        self._metrics = metrics
        self._fault_injection = fault_injection
        self._own_path = own_path

    async def __call__(self, request: Request) -> Response:
        path, method = request.path, request.method
        if path == "/healthz" and method == "GET":
            return healthz(self._health, request)
        if path == "/metrics" and method == "GET":
            return Response(200, generate_latest(self._metrics), CONTENT_TYPE_LATEST)
        if path == "/debug/actors" and method == "GET":
            return Response.json(200, msgspec.json.encode(self._tree().snapshot()))
        if path == "/pods" and method == "GET":
            return Response.json(200, msgspec.json.encode(self._pods()))
        if path == "/events" and method == "GET":
            events = self._events(
                namespace=_query(request, "namespace"), involved_uid=_query(request, "uid")
            )
            return Response.json(200, event_list(events))
        debugging = _DEBUGGING.match(path)
        if debugging is not None:
            return await self._debug(debugging["prefix"], request)
        match = _ACTOR_ACTION.match(path)
        if match is not None:
            if method != "POST":
                return _error(405, f"{path}: use POST")
            return await self._act(match["path"], match["action"])
        return _error(404, f"not found: {method} {path}")

    async def _debug(self, prefix: str, request: Request) -> Response:
        """The kubelet API's handler, answering as it does there (plain-text errors). The
        socket is its user's alone (0600, root's): no further authentication, and
        enableDebuggingHandlers, which guards the network port, does not apply."""
        handler = self._debugging.get(prefix)
        if handler is None:
            return _error(404, f"not found: {request.method} {request.path}: this daemon serves no /{prefix}")
        if request.method != _DEBUGGING_METHODS[prefix]:
            return _error(405, f"{request.path}: use {_DEBUGGING_METHODS[prefix]}")
        return await handler(request)

    async def _act(self, target: str, action: str) -> Response:
        if action == "crash" and not self._fault_injection:
            return _error(
                403,
                "fault injection is off: crashing actors is refused; "
                "start the daemon with --enable-fault-injection to allow it",
            )
        try:
            owner, name = self._tree().locate(target)
        except NotRunning as exc:
            return _error(409, str(exc))
        except LookupError as exc:
            if target.strip("/") == self._tree().path:
                return _error(400, f"{target} is the root: restart the daemon instead")
            return _error(404, f"no actor at {target}: {exc}")
        act = owner.restart_child if action == "restart" else owner.crash_child
        result = {"path": target, "result": "restarted" if action == "restart" else "crashed"}
        if self._own_path == target or self._own_path.startswith(target + "/"):
            # Acting on the server itself would cut this very answer short: answer first.
            result["result"] += " (after this response)"
            response = Response.json(202, msgspec.json.encode(result))
            response.after = lambda: act(name)
            return response
        try:
            await act(name)
        except NotRunning as exc:
            return _error(409, str(exc))
        return Response.json(200, msgspec.json.encode(result))


def _query(request: Request, name: str) -> str | None:
    """A query parameter's first value; absent or empty: None (no filter)."""
    return next((value for value in request.query.get(name, []) if value), None)


def _error(status: int, message: str) -> Response:
    return Response.json(status, msgspec.json.encode({"error": message}))
