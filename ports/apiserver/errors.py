"""Typed API errors: what the API server answered (a metav1.Status) or why it could not.

error_from_status() maps a status code and a Status body to one ApiError subclass, and
unavailable() explains a transport failure; both are pure, so every mapping is unit
tested without a server. Messages name the request, the identity and the fix.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .kubeconfig import Credentials


class ApiError(Exception):
    """Base of every error from the API-server port.

    status is the HTTP status (None when there was no answer), reason the Status reason
    (NotFound, Conflict, ...), message the API server's own message, verb the Kubernetes
    verb (get, list, watch, create, update, patch, delete) and method the HTTP one.
    """

    def __init__(self, status: int | None, reason: str, message: str, path: str, verb: str, *,
                 method: str = "", details: Mapping[str, Any] | None = None,
                 retry_after: float | None = None, text: str | None = None) -> None:
        super().__init__(text or f"{method or verb} {path}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.path = path
        self.verb = verb
        self.method = method
        self.details = dict(details or {})
        self.retry_after = retry_after  # seconds, from Retry-After or details.retryAfterSeconds


class Unauthorized(ApiError):
    """401: the API server did not accept the credentials (expired/unknown cert, bad token)."""


class Forbidden(ApiError):
    """403: authenticated, but the identity may not do this (RBAC, Node authorizer,
    NodeRestriction admission)."""


class NotFound(ApiError):
    """404: the object (or the resource) does not exist."""


class Conflict(ApiError):
    """409 Conflict: the object changed since it was read (resourceVersion or UID
    precondition): re-get and retry."""


class AlreadyExists(ApiError):
    """409 AlreadyExists: create of an object that exists."""


class Gone(ApiError):
    """410: the resourceVersion is too old (watch, or an expired list continue token):
    re-list."""


class Invalid(ApiError):
    """422: the object failed validation; `causes` lists {reason, message, field}."""

    @property
    def causes(self) -> list[dict[str, Any]]:
        return list(self.details.get("causes") or [])


class TooManyRequests(ApiError):
    """429: the API server's priority and fairness refused the request; retry after
    `retry_after` seconds."""


class ServerError(ApiError):
    """5xx: the API server failed (InternalError, ServiceUnavailable, Timeout, ...)."""


class ApiUnavailable(ApiError):
    """No answer: connection refused or reset, TLS handshake failure, or a timeout.

    `url` is the request's URL, `timeout` the limit that expired (None otherwise).
    """

    def __init__(self, message: str, *, path: str = "", verb: str = "", method: str = "",
                 url: str = "", timeout: float | None = None) -> None:
        super().__init__(None, "Unavailable", message, path, verb, method=method, text=message)
        self.url = url
        self.timeout = timeout


class ProtocolError(ApiError):
    """The API server answered something that is not the Kubernetes API (not JSON, a
    malformed watch event)."""


# --- request info: which verb on which resource, as the API server's authorizer sees it --


@dataclass(frozen=True)
class RequestInfo:
    verb: str  # get list watch create update patch delete deletecollection
    resource: str  # "pods", or "pods/status" with the subresource
    namespace: str | None
    name: str | None


def request_info(method: str, path: str, params: Mapping[str, Any] | None = None) -> RequestInfo:
    """The Kubernetes verb and resource of a request (apiserver's RequestInfoFactory, cut down)."""
    segments = [s for s in path.split("?", 1)[0].split("/") if s]
    if segments[:1] == ["api"]:
        rest = segments[2:]
    elif segments[:1] == ["apis"]:
        rest = segments[3:]
    else:
        rest = segments
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    watching = str((params or {}).get("watch", "")).lower() in ("1", "true")
    method = method.upper()
    if method == "GET":
        verb = "watch" if watching else ("get" if name else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}.get(method, method.lower())
    return RequestInfo(verb=verb, resource=resource, namespace=namespace, name=name)


# --- answers with a status --------------------------------------------------------------

_CLASSES: dict[int, type[ApiError]] = {
    401: Unauthorized, 403: Forbidden, 404: NotFound, 410: Gone, 422: Invalid,
    429: TooManyRequests,
}
_DEFAULT_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 409: "Conflict", 410: "Gone", 415: "UnsupportedMediaType",
    422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
    504: "Timeout",
}


def error_from_status(
    status: int,
    body: Mapping[str, Any] | None,
    *,
    method: str,
    path: str,
    params: Mapping[str, Any] | None = None,
    url: str | None = None,
    credentials: Credentials | None = None,
    retry_after: float | None = None,
    text: str | None = None,
) -> ApiError:
    """The ApiError for an HTTP error answer (or a watch ERROR event's Status).

    body is the decoded metav1.Status when the server sent one; text the raw body otherwise.
    """
    body = body if isinstance(body, Mapping) else {}
    info = request_info(method, path, params)
    reason = str(body.get("reason") or _DEFAULT_REASONS.get(status, "Unknown"))
    message = str(body.get("message") or (text or "").strip()[:500] or reason)
    details = body.get("details") if isinstance(body.get("details"), Mapping) else {}
    if retry_after is None and details.get("retryAfterSeconds"):
        retry_after = float(details["retryAfterSeconds"])
    if status == 409:
        cls: type[ApiError] = AlreadyExists if reason == "AlreadyExists" else Conflict
    elif status >= 500:
        cls = ServerError
    else:
        cls = _CLASSES.get(status, ApiError)
    prefix = f"{method.upper()} {url or path}: {status} {reason}"
    if cls is Unauthorized:
        line = f"{prefix}: {_unauthorized(message, credentials)}"
    elif cls is Forbidden:
        line = f"{prefix}: {_forbidden(message, info, params, credentials)}"
    elif cls is Gone:
        line = f"{prefix}: {message}; re-list to get a current resourceVersion"
    elif cls is Conflict:
        line = f"{prefix}: {message}; re-get the object and retry"
    elif cls is ServerError or cls is TooManyRequests:
        wait = f"; retry after {retry_after:g}s" if retry_after else "; retry with back-off"
        line = f"{prefix}: {message}{wait}"
    else:
        line = f"{prefix}: {message}"
    return cls(status, reason, message, path, info.verb, method=method.upper(), details=details,
               retry_after=retry_after, text=line)


def _unauthorized(message: str, credentials: Credentials | None) -> str:
    if credentials is None:
        return f"{message}: the API server did not accept this client's credentials"
    what = credentials.describe_user()
    if credentials.client_certificate is not None:
        cause = ("the certificate is expired, not yet valid, or not signed by the cluster's "
                 "client CA; renew it (or bootstrap the node again)")
    else:
        cause = "the token is expired, revoked or unknown; issue a new one"
    return (f"the API server refused {what} of user {credentials.user!r} in kubeconfig "
            f"{credentials.kubeconfig}: {cause}, or point --kubeconfig at valid credentials")


_USER_IN_MESSAGE = re.compile(r'User "([^"]+)"')


def _forbidden(message: str, info: RequestInfo, params: Mapping[str, Any] | None,
               credentials: Credentials | None) -> str:
    # The API server's message names the user it authenticated; trust it over the cert.
    found = _USER_IN_MESSAGE.search(message)
    identity = found.group(1) if found else (credentials.identity if credentials else None)
    who = identity or "this client"
    what = info.resource + (f' "{info.name}"' if info.name else "")
    scope = f" in namespace {info.namespace}" if info.namespace else (
        "" if info.name else " at the cluster scope")
    return (f"{who} may not {info.verb} {what}{scope}; "
            f"{_forbidden_hint(identity, info, params)} (API server: {message})")


def _forbidden_hint(identity: str | None, info: RequestInfo,
                    params: Mapping[str, Any] | None) -> str:
    if identity is None or not identity.startswith("system:node:"):
        return ("a kubelet needs a node identity: a client certificate with "
                "CN=system:node:<node name> and O=system:nodes")
    node = identity[len("system:node:"):]
    selector = str((params or {}).get("fieldSelector", ""))
    base = info.resource.split("/", 1)[0]
    if base == "pods" and info.verb in ("list", "watch") and selector != f"spec.nodeName={node}":
        return f"a kubelet may {info.verb} only pods with fieldSelector spec.nodeName={node}"
    if base == "nodes" and info.verb in ("list", "watch"):
        return f"a kubelet may {info.verb} only its own Node, with fieldSelector metadata.name={node}"
    if base == "nodes" and info.name not in (None, node):
        return (f"a kubelet may write only its own Node {node!r}: check --hostname-override "
                "against the node name in the client certificate")
    if base == "leases":
        return f"a kubelet may write only its own Lease kube-node-lease/{node}"
    return ("the Node authorizer and NodeRestriction admission let a node touch only itself "
            "and the pods bound to it")


# --- no answer --------------------------------------------------------------------------


def unavailable(
    exc: BaseException | None,
    *,
    method: str,
    path: str,
    url: str,
    params: Mapping[str, Any] | None = None,
    credentials: Credentials | None = None,
    timeout: float | None = None,
    watch_idle: bool = False,
) -> ApiUnavailable:
    """ApiUnavailable for a transport failure `exc`, or for a timeout when exc is None."""
    verb = request_info(method, path, params).verb
    prefix = f"{method.upper()} {url}"

    def make(text: str, limit: float | None = None) -> ApiUnavailable:
        return ApiUnavailable(text, path=path, verb=verb, method=method.upper(), url=url,
                              timeout=limit)

    if exc is None or _is_timeout(exc):
        if watch_idle:
            return make(f"{prefix}: the watch received no event or bookmark within "
                        f"{timeout:g}s (watch read timeout); the connection is presumed dead, "
                        "watch again from the last resourceVersion", timeout)
        limit = f"{timeout:g}s" if timeout is not None else "the timeout"
        return make(f"{prefix}: the API server did not answer within {limit} (the client's "
                    "request timeout); is it overloaded or unreachable?", timeout)
    tls = _find(exc, ssl.SSLError)
    source = credentials.ca_source if credentials else "the configured CA"
    if isinstance(tls, ssl.SSLCertVerificationError):
        detail = (tls.verify_message or str(tls)).rstrip(".")
        if "mismatch" in detail:  # "IP address mismatch" / "Hostname mismatch"
            where = (f"clusters[{credentials.cluster}].server of kubeconfig "
                     f"{credentials.kubeconfig}") if credentials else "the server URL"
            return make(f"{prefix}: TLS handshake failed: {detail}; put an address from the "
                        f"certificate's subjectAltNames in {where}, or set tls-server-name")
        return make(f"{prefix}: TLS handshake failed: {detail}; wrong CA? the server's "
                    f"certificate was checked against {source}")
    if tls is not None:
        reason = tls.reason or str(tls)
        if "ALERT" in reason.upper():
            who = credentials.describe_user() if credentials else "the client certificate"
            return make(f"{prefix}: the API server ended the TLS handshake ({reason}): it did "
                        f"not accept {who}; is it signed by the cluster's client CA?")
        return make(f"{prefix}: TLS failed ({reason}); is {url} an https endpoint of the API "
                    f"server, with a certificate signed by {source}?")
    errno_text = _os_error_text(exc)
    if "refused" in errno_text.lower():
        where = (f" (clusters[{credentials.cluster}].server in kubeconfig "
                 f"{credentials.kubeconfig})") if credentials else ""
        return make(f"{prefix}: connection refused; is the API server running at this "
                    f"address{where}?")
    text = errno_text or _chain_text(exc)
    return make(f"{prefix}: the connection failed or was closed before the API server "
                f"answered ({text})")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    stack = [exc]
    while stack:
        e = stack.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        stack += [e.__cause__, e.__context__]
        stack += list(getattr(e, "exceptions", ()))
    return seen


def _find(exc: BaseException, kind: type[BaseException]) -> Any:
    return next((e for e in _chain(exc) if isinstance(e, kind)), None)


def _is_timeout(exc: BaseException) -> bool:
    names = {type(e).__name__ for e in _chain(exc)}
    return bool(names & {"ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout",
                         "TimeoutException", "TooSlowError", "TimeoutError"})


def _os_error_text(exc: BaseException) -> str:
    for e in _chain(exc):
        if isinstance(e, OSError) and not isinstance(e, ssl.SSLError) and e.strerror:
            return e.strerror
    return ""


# httpx's transport errors often carry no text; say what each means.
_WHAT_BROKE = {
    "ReadError": "the connection broke while waiting for the answer",
    "WriteError": "the connection broke while sending the request",
    "RemoteProtocolError": "the server closed the connection without a complete answer",
    "ConnectError": "connect failed",
}


def _chain_text(exc: BaseException) -> str:
    for e in _chain(exc):
        if str(e):
            return str(e)
    return _WHAT_BROKE.get(type(exc).__name__, type(exc).__name__)
