"""The Kubernetes REST API of the test server: reads a request as kube-apiserver's handler
chain does (authenticate, faults, authorize, decode, admission, validate, store) and
answers with the object, a list, a watch stream, a TokenRequest or a metav1.Status."""

from __future__ import annotations

import copy
import datetime
import json
import random
import traceback
import uuid
from dataclasses import dataclass
from typing import Any

import trio

from tests.support.apiserver import authz, cluster, discovery, errors, patch, request_info, resources, reviews, rules, schema, selectors, tokens, values
from tests.support.apiserver.faults import Faults, RequestRecord, unix_now
from tests.support.apiserver.graph import NodeGraph
from tests.support.apiserver.httpserver import Request, Response
from tests.support.apiserver.kubelet_proxy import KubeletProxy
from tests.support.apiserver.pki import CertificateAuthority, Identity
from tests.support.apiserver.resources import Strategy
from tests.support.apiserver.store import Expired, ResourceType, Store
from tests.support.apiserver.watch import WatchFilter, WatchStream

SERVER_VERSION = {
    "major": "1",
    "minor": "36",
    "gitVersion": "v1.36.0-pykubelet-test-apiserver",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_JSON = "application/json"
_NAME_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"


@dataclass
class Settings:
    history_window: int = 1000
    bookmark_interval: float = 5.0
    watch_timeout: float = 1800.0
    field_validation: str = "Strict"  # used when a request gives no fieldValidation
    too_large_rv_wait: float = 3.0


def json_response(status: int, obj: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return Response(status, body, [("Content-Type", _JSON), ("Cache-Control", "no-cache, private"),
                                   ("Audit-Id", str(uuid.uuid4())), *(headers or [])])


def error_response(error: errors.ApiError) -> Response:
    return json_response(error.code, error.status(), list(error.headers.items()))


class KubeApi:
    def __init__(self, store: Store, faults: Faults, ca: CertificateAuthority, settings: Settings, *,
                 api_port: int = 6443) -> None:
        self.store = store
        self.faults = faults
        self.ca = ca
        self.settings = settings
        self.tokens: dict[str, Identity] = {}
        self.grants: list[reviews.Grant] = []  # answer SubjectAccessReviews (reviews.py)
        self.graph = NodeGraph(store)
        self.issuer = tokens.TokenIssuer()
        self.kubelets: KubeletProxy | None = None  # set by the server process (it holds the CA key)
        for name in resources.INITIAL_NAMESPACES:
            self._create_system_object("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self._create_system_object("services", cluster.kubernetes_service(api_port))

    def _create_system_object(self, resource: str, obj: dict[str, Any]) -> None:
        """Store what the control plane makes itself, with the defaults a create gives; a
        new namespace gets its default ServiceAccount and kube-root-ca.crt ConfigMap."""
        meta = obj["metadata"]
        if self.store.exists(resource, meta.get("namespace", ""), meta["name"]):
            return
        strategy = resources.STRATEGIES[("", resource)]
        resources.prepare_for_create(strategy, obj)
        if resource == "services":
            cluster.allocate_service(obj, None, self.store.list("services"))
        self.store.create(resource, obj)
        if resource == "namespaces":
            for child_resource, child in cluster.namespace_objects(meta["name"], self.ca.cert_pem):
                self._create_system_object(child_resource, child)

    # --- entry point -----------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        started = trio.current_time()
        record = RequestRecord(unix_now(), request.method, request.path, request.query_string,
                               None, None, None, None, None, None)
        identity = authz.authenticate(request.connection.peer_cert, request.headers.get("authorization"), self.ca, self.tokens)
        request.connection.identity = identity
        record.user = identity.user if identity else None
        try:
            ri = request_info.parse_request_info(request)
        except errors.ApiError:
            ri = None
        if ri is not None:
            record.verb, record.resource = ri.verb, ri.resource_path
            record.namespace, record.name = ri.namespace or None, ri.name or None
        response = await self._with_faults(request, identity, ri, record)
        record.status = None if response.reset else response.status
        record.duration = trio.current_time() - started
        self.faults.record(record)
        return response

    async def _with_faults(self, request: Request, identity: Identity | None, ri: authz.RequestInfo | None,
                           record: RequestRecord) -> Response:
        verb = ri.verb if ri else None
        resource = ri.resource_path if ri else None
        latency = self.faults.find("latency", identity, verb, resource)
        if latency is not None:
            latency.consume()
            record.fault = "latency"
            await trio.sleep(latency.seconds)
        if await self.faults.wait_while_hanging(identity, verb, resource):
            record.fault = "hang"
        reset = self.faults.find("reset", identity, verb, resource)
        if reset is not None:
            reset.consume()
            record.fault = "reset"
            return Response(0, reset=True)
        failure = self.faults.find("fail", identity, verb, resource)
        if failure is not None:
            failure.consume()
            record.fault = "fail"
            return error_response(request_info.injected_error(failure.status, failure.message, failure.retry_after))
        if identity is None:
            return error_response(errors.unauthorized())
        try:
            return await self._dispatch(request, identity, ri, record)
        except errors.ApiError as error:
            return error_response(error)
        except Exception as exc:  # a bug in the test server must still answer, and loudly
            traceback.print_exc()
            return error_response(errors.internal_error(f"test API server bug: {exc!r}"))

    async def _dispatch(self, request: Request, identity: Identity, ri: authz.RequestInfo | None,
                        record: RequestRecord) -> Response:
        if ri is None:
            return self._non_resource(request)
        review = reviews.review_type(ri.group, ri.resource)
        if review is not None:
            return self.review(request, identity, ri, review)
        if self.kubelets is None and ri.subresource in ("proxy", *request_info.KUBELET_SUBRESOURCES):
            raise errors.ApiError(503, "this API server does not proxy to kubelets", reason="ServiceUnavailable")
        if ri.resource == "nodes" and ri.subresource == "proxy":
            assert self.kubelets is not None
            authz.authorize(identity, ri, [], None, self.graph)
            return self.kubelets.node_proxy(request, ri.name, request.path.split("/proxy/", 1)[1])
        if ri.resource == "pods" and ri.subresource in request_info.KUBELET_SUBRESOURCES:
            pod = self.store.get("pods", ri.namespace, ri.name)
            authz.authorize(identity, ri, [], pod, self.graph)
            if pod is None:
                raise errors.not_found("pods", "", ri.name)
            assert self.kubelets is not None
            if ri.subresource == "log":
                return self.kubelets.pod_log(request, pod)
            return self.kubelets.pod_stream(request, pod, ri.subresource)
        strategy = resources.strategy_for(ri.group, ri.resource)
        assert strategy is not None
        if ri.subresource and ri.subresource not in strategy.subresources:
            raise errors.not_found(ri.resource_path, ri.group, ri.name)
        if ri.subresource in resources.CREATE_ONLY_SUBRESOURCES and ri.verb != "create":
            authz.authorize(identity, ri, [], None, self.graph)
            raise errors.method_not_allowed(request.method)
        if ri.verb == "create" and ri.subresource == "token":
            return self.create_token(request, identity, ri, record)
        if ri.verb == "get":
            return self.get(identity, ri, strategy)
        if ri.verb == "list":
            return self.list(request, identity, ri, strategy)
        if ri.verb == "watch":
            return await self.watch(request, identity, ri, strategy)
        if ri.verb == "create" and ri.subresource == "binding":
            return self.bind(request, identity, ri)
        if ri.verb == "create":
            return self.create(request, identity, ri, strategy)
        if ri.verb == "update":
            return self.update(request, identity, ri, strategy)
        if ri.verb == "patch":
            return self.patch(request, identity, ri, strategy)
        if ri.verb == "delete":
            return self.delete(request, identity, ri, strategy)
        raise errors.method_not_allowed(request.method)

    def _non_resource(self, request: Request) -> Response:
        if request.path == "/version":
            return json_response(200, SERVER_VERSION)
        if request.path in ("/healthz", "/livez", "/readyz"):
            return Response(200, b"ok", [("Content-Type", "text/plain; charset=utf-8")])
        if request.path == "/api":
            return json_response(200, {"kind": "APIVersions", "versions": ["v1"],
                                       "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
        if request.path == "/apis":
            return json_response(200, discovery.groups())
        parts = [p for p in request.path.split("/") if p]
        if parts in (["api", "v1"], ["apis", *parts[1:2], "v1"]) and len(parts) <= 3:
            listed = discovery.resource_list(parts[1] if parts[0] == "apis" else "")
            if listed is not None:
                return json_response(200, listed)
        raise errors.ApiError(404, "the server could not find the requested resource", reason="NotFound",
                              details={"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]})

    # --- reads ------------------------------------------------------------------------------

    def get(self, identity: Identity, ri: authz.RequestInfo, strategy: Strategy) -> Response:
        obj = self.store.get(ri.resource, ri.namespace, ri.name)
        authz.authorize(identity, ri, [], obj if ri.resource == "pods" else None, self.graph)
        if obj is None:
            raise errors.not_found(ri.resource, ri.group, ri.name)
        return json_response(200, obj)

    def _selectors(self, request: Request, ri: authz.RequestInfo) -> tuple[list, list]:
        fields = selectors.parse_field_selector(request.param("fieldSelector"), ri.resource)
        labels = selectors.parse_label_selector(request.param("labelSelector"))
        return fields, labels

    def list(self, request: Request, identity: Identity, ri: authz.RequestInfo, strategy: Strategy) -> Response:
        fields, labels = self._selectors(request, ri)
        authz.authorize(identity, ri, fields, None, self.graph)
        rv_param = request.param("resourceVersion") or ""
        match = request.param("resourceVersionMatch") or ""
        if rv_param not in ("", "0"):
            rv = request_info.parse_rv(rv_param)
            if rv > self.store.rv:
                raise request_info.too_large(rv, self.store.rv)
            if match == "Exact" and rv != self.store.rv:
                raise errors.gone(f"too old resource version: {rv} ({self.store.rv})")
        namespace = ri.namespace or None
        wanted = WatchFilter(strategy.type, namespace, fields, labels)
        items = [obj for obj in self.store.list(ri.resource, namespace) if wanted.matches(obj)]
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        limit = int(request.param("limit") or 0)
        start = 0
        if cont := request.param("continue"):
            start = request_info.decode_continue(cont)
        if limit > 0 and (rv_param != "0" or cont):
            page = items[start:start + limit]
            if start + limit < len(items):
                meta["continue"] = request_info.encode_continue(self.store.rv, start + limit)
                meta["remainingItemCount"] = len(items) - start - limit
            items = page
        for item in items:
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return json_response(200, {"kind": strategy.type.list_kind, "apiVersion": strategy.type.api_version,
                                   "metadata": meta, "items": items})

    async def watch(self, request: Request, identity: Identity, ri: authz.RequestInfo, strategy: Strategy) -> Response:
        fields, labels = self._selectors(request, ri)
        authz.authorize(identity, ri, fields, None, self.graph)
        rv_param = request.param("resourceVersion") or ""
        bookmarks = request.param("allowWatchBookmarks") in ("true", "1")
        send_initial = request.param("sendInitialEvents")
        timeout = request.param("timeoutSeconds")
        deadline = trio.current_time() + (float(timeout) if timeout else self.settings.watch_timeout)
        wanted = WatchFilter(strategy.type, ri.namespace or None, fields, labels)
        if send_initial == "true" and (not bookmarks or request.param("resourceVersionMatch") != "NotOlderThan"):
            raise errors.invalid("ListOptions", "", "meta.k8s.io", [errors.forbidden_field(
                "sendInitialEvents", "sendInitialEvents is forbidden for watch unless allowWatchBookmarks=true and "
                "resourceVersionMatch=NotOlderThan")])
        if rv_param not in ("", "0"):
            rv = request_info.parse_rv(rv_param)
            if rv > self.store.rv and not await self.store.wait_for_rv(rv, self.settings.too_large_rv_wait):
                raise request_info.too_large(rv, self.store.rv)
        # From here to the subscription nothing awaits: no event can slip between them.
        initial: list[tuple[str, dict[str, Any]]] = []
        expired: str | None = None
        if rv_param in ("", "0") or send_initial == "true":
            initial = [("ADDED", obj) for obj in self.store.list(ri.resource, ri.namespace or None) if wanted.matches(obj)]
            after = self.store.rv
        else:
            rv = request_info.parse_rv(rv_param)
            after = rv
            try:
                backlog = self.store.events_since(ri.resource, rv)
            except Expired as exc:
                expired = str(exc)
                backlog = []
            for event in backlog:
                if (translated := wanted.translate(event)) is not None:
                    initial.append(translated)
            if backlog:
                after = backlog[-1].rv
        watcher = self.store.subscribe(ri.resource)
        if expired is not None:  # the stream is one ERROR event, as the watch cache answers
            self.store.unsubscribe(watcher)
            initial = [("ERROR", errors.status_object(410, expired, "Expired"))]

        async def stall() -> None:
            while self.faults.find("hang", identity, "watch", ri.resource_path) is not None:
                with trio.move_on_after(0.05):
                    await self.faults.changed.wait()

        stream = WatchStream(
            store=self.store, watcher=watcher, filter=wanted, initial=initial,
            send_initial_end_bookmark=send_initial == "true" and bookmarks and expired is None,
            after_rv=after, bookmarks=bookmarks, bookmark_interval=lambda: self.settings.bookmark_interval,
            deadline=deadline, stall=stall,
        )
        return Response(200, headers=[("Content-Type", _JSON), ("Cache-Control", "no-cache, private"),
                                      ("Audit-Id", str(uuid.uuid4()))], stream=stream.events())

    # --- writes -----------------------------------------------------------------------------

    def _decode_body(self, request: Request, strategy: Strategy, *, rt: ResourceType | None = None) -> tuple[dict[str, Any], list[str]]:
        body = request_info.parse_body(request)
        rt = rt or strategy.type
        kind = rt.kind
        if not isinstance(body, dict):
            raise errors.bad_request(f"Object '{kind}' is invalid: the body must be a JSON object")
        if body.get("kind", kind) != kind:
            raise errors.bad_request(f'{kind} in version "{rt.version}" cannot be handled as a {kind}: '
                                     f'the kind in the data ({body.get("kind")}) does not match the expected kind ({kind})')
        if body.get("apiVersion", rt.api_version) != rt.api_version:
            raise errors.bad_request(f"the API version in the data ({body.get('apiVersion')}) does not match the "
                                     f"expected API version ({rt.api_version})")
        body["kind"], body["apiVersion"] = kind, rt.api_version
        return self._decode_object(request, body, strategy, rt=rt)

    def _decode_object(self, request: Request, body: dict[str, Any], strategy: Strategy, *,
                       rt: ResourceType | None = None) -> tuple[dict[str, Any], list[str]]:
        rt = rt or strategy.type
        decoded = schema.decode(body, rt.group, rt.version, rt.kind)
        warnings = []
        if decoded.unknown_fields:
            mode = request.param("fieldValidation") or self.settings.field_validation
            if mode == "Strict":
                detail = ", ".join(f'unknown field "{f}"' for f in decoded.unknown_fields)
                raise errors.bad_request(f"strict decoding error: {detail}")
            if mode == "Warn":
                warnings = [f'299 - "unknown field \\"{f}\\""' for f in decoded.unknown_fields]
        obj = decoded.obj
        obj.setdefault("metadata", {})
        if strategy.convert is not None and rt == strategy.type:
            strategy.convert(obj)
        return obj, warnings

    def _validate(self, strategy: Strategy, obj: dict[str, Any], old: dict[str, Any] | None, subresource: str) -> None:
        rt = strategy.type
        schema.validate(obj, rt.group, rt.version, rt.kind)
        if old is None:
            causes = strategy.validate(obj)
        elif subresource == "status":
            causes = resources.immutable_meta_causes(obj, old)
            causes += strategy.status_rules(obj, old) if strategy.status_rules else strategy.validate(obj)
        elif subresource == "resize":
            causes = rules.pod_resize(obj, old)
        else:
            causes = resources.immutable_meta_causes(obj, old)
            causes += strategy.update_rules(obj, old) if strategy.update_rules else strategy.validate(obj)
        if causes:
            raise errors.invalid(rt.kind, obj["metadata"].get("name", ""), rt.group, causes)

    def _check_namespace(self, ri: authz.RequestInfo, strategy: Strategy) -> None:
        if strategy.type.namespaced and not self.store.exists("namespaces", "", ri.namespace):
            raise errors.not_found("namespaces", "", ri.namespace)

    def create(self, request: Request, identity: Identity, ri: authz.RequestInfo, strategy: Strategy) -> Response:
        if ri.name:
            raise errors.method_not_allowed(request.method)
        authz.authorize(identity, ri, [], None, self.graph)
        obj, warnings = self._decode_body(request, strategy)
        meta = obj["metadata"]
        if strategy.type.namespaced:
            if meta.get("namespace") and meta["namespace"] != ri.namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = ri.namespace
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choice(_NAME_SUFFIX) for _ in range(5))
        ri = authz.RequestInfo(ri.verb, ri.group, ri.version, ri.resource, ri.subresource, ri.namespace, meta.get("name", ""))
        self._check_namespace(ri, strategy)
        resources.prepare_for_create(strategy, obj)
        if ri.resource == "pods":
            account = (obj.get("spec") or {}).get("serviceAccountName", "")
            cluster.admit_pod_service_account(obj, self.store.exists("serviceaccounts", ri.namespace, account))
        authz.admit(identity, ri, obj, None)
        self._validate(strategy, obj, None, "")
        if self.store.exists(ri.resource, ri.namespace, meta["name"]):
            raise errors.already_exists(ri.resource, ri.group, meta["name"])
        if ri.resource == "services":
            cluster.allocate_service(obj, None, self.store.list("services"))
        stored = self.store.create(ri.resource, obj)
        if ri.resource == "namespaces":
            for child_resource, child in cluster.namespace_objects(meta["name"], self.ca.cert_pem):
                self._create_system_object(child_resource, child)
        return json_response(201, stored, [("Warning", w) for w in warnings])

    def _write_over(self, request: Request, identity: Identity, ri: authz.RequestInfo, strategy: Strategy,
                    new: dict[str, Any], old: dict[str, Any], warnings: list[str]) -> Response:
        """The common tail of update and patch: optimistic concurrency, strategy, admission,
        validation, a no-op check, and finalizer-driven deletion."""
        meta = new.setdefault("metadata", {})
        if meta.get("name", ri.name) != ri.name:
            raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL ({ri.name})")
        meta["name"] = ri.name
        if strategy.type.namespaced:
            if meta.get("namespace", ri.namespace) != ri.namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = ri.namespace
        requested_rv = meta.get("resourceVersion")
        if requested_rv and requested_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(ri.resource, ri.group, ri.name, errors.MODIFIED)
        new = resources.prepare_for_update(strategy, new, old, ri.subresource)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        authz.admit(identity, ri, new, old)
        if ri.resource == "services" and not ri.subresource:
            cluster.allocate_service(new, old, self.store.list("services"))
        self._validate(strategy, new, old, ri.subresource)
        headers = [("Warning", w) for w in warnings]
        if new == old:
            return json_response(200, old, headers)  # an unchanged object is not written
        new_meta = new["metadata"]
        if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers") and not new_meta.get("deletionGracePeriodSeconds"):
            final = self.store.delete(ri.resource, ri.namespace, ri.name)
            return json_response(200, final, headers)
        return json_response(200, self.store.update(ri.resource, new), headers)

    def update(self, request: Request, identity: Identity, ri: authz.RequestInfo, strategy: Strategy) -> Response:
        if not ri.name:
            raise errors.method_not_allowed(request.method)
        old = self.store.get(ri.resource, ri.namespace, ri.name)
        authz.authorize(identity, ri, [], old if ri.resource == "pods" else None, self.graph)
        if old is None:
            if strategy.create_on_update and not ri.subresource:
                create_ri = authz.RequestInfo("create", ri.group, ri.version, ri.resource, "", ri.namespace, "")
                return self.create(request, identity, create_ri, strategy)
            raise errors.not_found(ri.resource, ri.group, ri.name)
        new, warnings = self._decode_body(request, strategy)
        return self._write_over(request, identity, ri, strategy, new, old, warnings)

    def patch(self, request: Request, identity: Identity, ri: authz.RequestInfo, strategy: Strategy) -> Response:
        if not ri.name:
            raise errors.method_not_allowed(request.method)
        content_type = (request.headers.get("content-type") or "").split(";")[0].strip()
        old = self.store.get(ri.resource, ri.namespace, ri.name)
        authz.authorize(identity, ri, [], old if ri.resource == "pods" else None, self.graph)
        if content_type == patch.APPLY:
            raise errors.ApiError(415, "server-side apply (application/apply-patch+yaml) is not implemented by the test API server",
                                  reason="UnsupportedMediaType")
        if content_type not in (patch.STRATEGIC, patch.MERGE, patch.JSON_PATCH):
            raise errors.unsupported_media_type(content_type)
        if old is None:
            raise errors.not_found(ri.resource, ri.group, ri.name)
        try:
            body = json.loads(request.body or b"null")
        except ValueError as exc:
            raise errors.bad_request(f"error decoding patch: {exc}") from None
        rt = strategy.type
        patched = patch.apply(content_type, old, body, schema.kind_schema(rt.group, rt.version, rt.kind))
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch did not produce an object")
        patched["kind"], patched["apiVersion"] = rt.kind, rt.api_version
        new, warnings = self._decode_object(request, patched, strategy)
        return self._write_over(request, identity, ri, strategy, new, old, warnings)

    def delete(self, request: Request, identity: Identity, ri: authz.RequestInfo, strategy: Strategy) -> Response:
        if not ri.name or ri.subresource:
            raise errors.method_not_allowed(request.method)
        old = self.store.get(ri.resource, ri.namespace, ri.name)
        authz.authorize(identity, ri, [], old if ri.resource == "pods" else None, self.graph)
        if old is None:
            raise errors.not_found(ri.resource, ri.group, ri.name)
        options = request_info.parse_delete_options(request)
        authz.admit(identity, ri, None, old)
        meta = old["metadata"]
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
            raise errors.conflict(ri.resource, ri.group, ri.name,
                                  f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in object meta: {meta.get('uid')}")
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta.get("resourceVersion"):
            raise errors.conflict(ri.resource, ri.group, ri.name,
                                  f"Precondition failed: ResourceVersion in precondition: {preconditions['resourceVersion']}, "
                                  f"ResourceVersion in object meta: {meta.get('resourceVersion')}")
        grace = options.get("gracePeriodSeconds")
        obj, deleted = self._delete(strategy, ri, old, grace if isinstance(grace, int) else None)
        if deleted and not strategy.return_deleted_object:
            details = {"name": ri.name, "kind": ri.resource, "uid": meta.get("uid")}
            if ri.group:
                details["group"] = ri.group
            return json_response(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                       "details": details})
        return json_response(200, obj)

    def _delete(self, strategy: Strategy, ri: authz.RequestInfo, old: dict[str, Any], grace: int | None) -> tuple[dict[str, Any], bool]:
        """rest.BeforeDelete + Store.Delete: (object returned, whether it is gone)."""
        meta = old["metadata"]
        finalizers = bool(meta.get("finalizers"))
        first = not meta.get("deletionTimestamp")
        if not first:
            current = meta.get("deletionGracePeriodSeconds")
            if not current:
                if finalizers:
                    return old, False
                return self.store.delete(ri.resource, ri.namespace, ri.name), True
            if grace is None or grace >= current:
                return old, False  # graceful deletion is pending; only a shorter period changes it
            started = values.parse_time(meta["deletionTimestamp"]).timestamp() - current
            period = grace
        else:
            period = resources.graceful_period(old, grace) if strategy.graceful else 0
            started = values.now().timestamp()
        if period == 0 and not finalizers:
            return self.store.delete(ri.resource, ri.namespace, ri.name), True
        meta["deletionTimestamp"] = values.format_time(datetime.datetime.fromtimestamp(started + period, datetime.timezone.utc))
        meta["deletionGracePeriodSeconds"] = period
        if first and strategy.generation and "generation" in meta:
            meta["generation"] = int(meta["generation"]) + 1
        return self.store.update(ri.resource, old), False

    def bind(self, request: Request, identity: Identity, ri: authz.RequestInfo) -> Response:
        authz.authorize(identity, ri, [], None, self.graph)
        body = request_info.parse_body(request)
        target = (body or {}).get("target") or {}
        pod = self.store.get("pods", ri.namespace, ri.name)
        if pod is None:
            raise errors.not_found("pods", "", ri.name)
        if (pod.get("spec") or {}).get("nodeName"):
            raise errors.conflict("pods", "", ri.name, f"pod {ri.name} is already assigned to node \"{pod['spec']['nodeName']}\"")
        if not target.get("name"):
            raise errors.invalid("Binding", ri.name, "", [errors.required("target.name")])
        pod["spec"]["nodeName"] = target["name"]
        conditions = pod.setdefault("status", {}).setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": resources.now_time()})
        self.store.update("pods", pod)
        return json_response(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})

    # --- TokenRequest -----------------------------------------------------------------------

    def create_token(self, request: Request, identity: Identity, ri: authz.RequestInfo, record: RequestRecord) -> Response:
        """POST serviceaccounts/<name>/token: authorize (Node authorizer graph), decode,
        NodeRestriction (mutating admission, before the REST's Create), then TokenREST.Create."""
        try:  # the log keeps what was asked for, even when it is refused before decoding
            sent = request_info.parse_body(request)
            record.token_request = sent if isinstance(sent, dict) else None
        except errors.ApiError:
            pass
        authz.authorize(identity, ri, [], None, self.graph)
        strategy = resources.STRATEGIES[("", "serviceaccounts")]
        body, warnings = self._decode_body(request, strategy, rt=resources.TOKEN_REQUEST)
        schema.validate(body, resources.TOKEN_REQUEST.group, "v1", "TokenRequest")
        spec = tokens.default(body)
        record.token_request = copy.deepcopy(body)
        authz.admit_token_request(identity, ri, spec, lambda name: self.store.get("pods", ri.namespace, name),
                                  tokens.API_AUDIENCES)
        tokens.check_body(body, ri.namespace, ri.name)
        account = self.store.get("serviceaccounts", ri.namespace, ri.name)
        if account is None:
            raise errors.not_found("serviceaccounts", "", ri.name)
        if body["metadata"].get("uid") and body["metadata"]["uid"] != account["metadata"]["uid"]:
            raise errors.conflict("TokenRequest", tokens.GROUP, ri.name,
                                  f"the UID in the token request ({body['metadata']['uid']}) does not match the UID of "
                                  f"the service account ({account['metadata']['uid']})")
        if not spec.get("audiences"):
            spec["audiences"] = list(tokens.API_AUDIENCES)
        tokens.validate(spec)

        def get(resource: str, name: str) -> dict[str, Any] | None:
            return self.store.get(resource, "" if resource == "nodes" else ri.namespace, name)

        answer = tokens.issue(self.issuer, body, account, tokens.bound_objects(spec, ri.name, get))
        record.token_request = copy.deepcopy(answer)
        return json_response(201, answer, [("Warning", w) for w in warnings])

    # --- TokenReview and SubjectAccessReview ---------------------------------------------------

    def review(self, request: Request, identity: Identity, ri: authz.RequestInfo, rt: ResourceType) -> Response:
        """POST tokenreviews / subjectaccessreviews: authorize, decode, validate, answer 201
        with the review and its status. Nothing is stored."""
        authz.authorize(identity, ri, [], None, self.graph)
        if ri.verb != "create":
            raise errors.method_not_allowed(request.method)
        no_conversion = resources.STRATEGIES[("", "serviceaccounts")]
        body, warnings = self._decode_body(request, no_conversion, rt=rt)
        schema.validate(body, rt.group, rt.version, rt.kind)
        if rt == reviews.TOKEN_REVIEW:
            answer = reviews.review_token(body, self.tokens, self.issuer, self.store.get)
        else:
            answer = reviews.review_access(body, self.grants, self._authorizer_allows)
        return json_response(201, answer, [("Warning", w) for w in warnings])

    def _authorizer_allows(self, who: Identity, ri: authz.RequestInfo) -> bool:
        """What this server's own authorizer says of a request (before admission)."""
        pod = self.store.get("pods", ri.namespace, ri.name) if ri.resource == "pods" and ri.name else None
        try:
            authz.authorize(who, ri, [], pod, self.graph)
        except errors.ApiError:
            return False
        return True
