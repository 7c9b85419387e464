"""The control port: plain HTTP on 127.0.0.1, for the test process only. It turns faults on
and off, expires watches, registers bearer tokens, changes settings and hands out the
request log and a dump of the stored objects. Nothing here is part of the Kubernetes API.

    POST   /faults          {"kind": "fail"|"hang"|"reset"|"latency", ...}  (see faults.Fault)
    DELETE /faults
    POST   /expire-watches  -> {"resourceVersion": "<new version>"}
    GET    /requests        -> [RequestRecord, ...];  DELETE /requests
    POST   /tokens          {"token": ..., "user": ..., "groups": [...]}
    POST   /grants          {"users": [...], "groups": [...], "verbs": [...], "resources": [...], "name": ...}
    DELETE /grants
    PATCH  /settings        {"bookmark_interval": 1.0, "history_window": 100, "field_validation": "Warn", ...}
    GET    /objects         -> {"pods": [...], "nodes": [...], ...}
    GET    /ready           -> {"resourceVersion": ...}
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tests.support.apiserver import reviews
from tests.support.apiserver.api import KubeApi, json_response
from tests.support.apiserver.httpserver import HttpServer, Request, Response
from tests.support.apiserver.pki import Identity


class Control:
    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.api_http: HttpServer | None = None  # set once the API listener exists

    async def handle(self, request: Request) -> Response:
        try:
            body: Any = json.loads(request.body) if request.body.strip() else {}
        except ValueError as exc:
            return json_response(400, {"error": f"invalid JSON: {exc}"})
        route = (request.method, request.path.rstrip("/"))
        try:
            return self._route(route, body)
        except (ValueError, TypeError, KeyError) as exc:
            return json_response(400, {"error": str(exc)})

    def _route(self, route: tuple[str, str], body: Any) -> Response:
        api = self.api
        if route == ("GET", "/ready"):
            return json_response(200, {"resourceVersion": str(api.store.rv)})
        if route == ("POST", "/faults"):
            fault = api.faults.add(body)
            aborted = 0
            if fault.kind == "reset" and self.api_http is not None:
                aborted = self.api_http.abort_connections(lambda conn: fault.matches_identity(conn.identity))
            return json_response(200, {"ok": True, "aborted_connections": aborted})
        if route == ("DELETE", "/faults"):
            api.faults.clear()
            return json_response(200, {"ok": True})
        if route == ("POST", "/expire-watches"):
            return json_response(200, {"resourceVersion": str(api.store.expire())})
        if route == ("GET", "/requests"):
            return json_response(200, api.faults.records())
        if route == ("DELETE", "/requests"):
            api.faults.log.clear()
            return json_response(200, {"ok": True})
        if route == ("POST", "/tokens"):
            api.tokens[body["token"]] = Identity(body["user"], tuple(body.get("groups") or ()))
            return json_response(200, {"ok": True})
        if route == ("POST", "/grants"):
            grant = reviews.Grant.from_json(body, f"pykubelet-test-grant-{len(api.grants) + 1}")
            api.grants.append(grant)
            return json_response(200, {"ok": True, "name": grant.name})
        if route == ("DELETE", "/grants"):
            api.grants.clear()
            return json_response(200, {"ok": True})
        if route == ("PATCH", "/settings"):
            fields = {f.name for f in dataclasses.fields(api.settings)}
            for key, value in body.items():
                if key not in fields:
                    raise ValueError(f"unknown setting {key!r}; one of {sorted(fields)}")
                setattr(api.settings, key, value)
            api.store.history_window = api.settings.history_window
            return json_response(200, dataclasses.asdict(api.settings))
        if route == ("GET", "/objects"):
            return json_response(200, api.store.dump())
        return json_response(404, {"error": f"no control endpoint {route[0]} {route[1]}"})
