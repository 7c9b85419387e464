"""Reading a request the way kube-apiserver's RequestInfoResolver and decoders do: the
resource, verb, namespace and name a URL names, the body (JSON or YAML), DeleteOptions,
resourceVersions and continue tokens; and the Status of an injected failure."""

from __future__ import annotations

import base64
import json
from typing import Any

import yaml

from tests.support.apiserver import authz, errors, resources, reviews
from tests.support.apiserver.httpserver import Request

JSON = "application/json"


def parse_request_info(request: Request) -> authz.RequestInfo | None:
    """The resource request a URL names; None for a non-resource path (/version, /healthz)."""
    parts = [p for p in request.path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3 and not (group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if version == "v1" and reviews.review_type(group, resource) is not None:  # POST-only, unnamed, cluster-scoped
        if namespace or len(rest) > 1:
            raise errors.ApiError(404, "the server could not find the requested resource", reason="NotFound")
        return authz.RequestInfo(_verb(request, ""), group, version, resource, "", "", "")
    if group == "" and resource == "nodes" and len(rest) > 3 and rest[2] == "proxy":  # nodes/{n}/proxy/{path}
        return authz.RequestInfo(_proxy_verb(request), "", "v1", "nodes", "proxy", "", name)
    if group == "" and resource == "pods" and subresource in KUBELET_SUBRESOURCES and len(rest) == 3:
        verb = "get" if subresource == "log" else _proxy_verb(request)
        return authz.RequestInfo(verb, "", "v1", "pods", subresource, namespace, name)
    if len(rest) > 3 or resources.strategy_for(group, resource) is None or (group and version != "v1"):
        raise errors.ApiError(404, "the server could not find the requested resource", reason="NotFound")
    strategy = resources.STRATEGIES[(group, resource)]
    if strategy.type.namespaced and not namespace and request.method != "GET":
        raise errors.ApiError(404, "the server could not find the requested resource", reason="NotFound")
    if not strategy.type.namespaced and namespace:
        raise errors.ApiError(404, "the server could not find the requested resource", reason="NotFound")
    return authz.RequestInfo(_verb(request, name), group, version, resource, subresource, namespace, name)


# Pod subresources served by the node's kubelet (kubelet_proxy.py).
KUBELET_SUBRESOURCES = frozenset({"log", "exec", "attach", "portforward"})


def _proxy_verb(request: Request) -> str:
    """kube-apiserver's verbs for connect subresources: the HTTP method, lower-cased, as
    RBAC rules name them (GET -> get, POST -> create)."""
    return {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        request.method, request.method.lower())


def _verb(request: Request, name: str) -> str:
    method = request.method
    if method == "GET":
        return "get" if name else ("watch" if request.param("watch") in ("1", "true") else "list")
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def parse_body(request: Request) -> Any:
    content_type = (request.headers.get("content-type") or JSON).split(";")[0].strip()
    if content_type in ("application/yaml", "application/x-yaml", "text/yaml"):
        try:
            return yaml.safe_load(request.body)
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error decoding YAML: {exc}") from None
    if content_type not in (JSON, "*/*", ""):
        raise errors.unsupported_media_type(content_type)
    try:
        return json.loads(request.body or b"null")
    except ValueError as exc:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None


def parse_delete_options(request: Request) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if request.body.strip():
        body = parse_body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        options.update(body)
    if (grace := request.param("gracePeriodSeconds")) is not None:
        try:
            options["gracePeriodSeconds"] = int(grace)
        except ValueError:
            raise errors.bad_request(f"gracePeriodSeconds: invalid value {grace!r}") from None
    if request.param("dryRun") or options.get("dryRun"):
        raise errors.bad_request("dryRun is not implemented by the test API server")
    return options


def parse_rv(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise errors.ApiError(400, f"invalid resource version: {text}", reason="BadRequest") from None


def too_large(rv: int, current: int) -> errors.ApiError:
    return errors.ApiError(504, f"Too large resource version: {rv}, current: {current}", reason="Timeout",
                           details={"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                                    "retryAfterSeconds": 1}, headers={"Retry-After": "1"})


def encode_continue(rv: int, offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": offset}).encode()).decode()


def decode_continue(token: str) -> int:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["start"])
    except Exception:
        raise errors.bad_request("continue key is not valid: illegal base64 data") from None


def injected_error(status: int, message: str, retry_after: int | None) -> errors.ApiError:
    messages = {
        500: "Internal error occurred: injected fault",
        503: "the server is currently unable to handle the request",
        429: "Too many requests, please try again later.",
        504: "the server was unable to return a response in the time allotted, but may still be processing the request",
    }
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    details = {"retryAfterSeconds": retry_after} if retry_after is not None else None
    return errors.ApiError(status, message or messages.get(status, f"injected fault {status}"), details=details, headers=headers)
