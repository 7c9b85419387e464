"""Who may use the kubelet API, decided without I/O: the authorization attributes of a
request (Go: pkg/kubelet/server/auth.go), the
TokenReview and SubjectAccessReview the kubelet sends and how their answers read, the
kubelet's 401/403/500 words, and the checks of the authentication/authorization settings.
Client certificates are checked by pods/client_certificate.py (it needs cryptography).

actors/server/auth.py (KubeletAuth) reads the CA file, calls the API server and caches.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from pykubelet.messages.config import (
    AUTHORIZATION_MODE_ALWAYS_ALLOW,
    AUTHORIZATION_MODE_WEBHOOK,
    AUTHORIZATION_MODES,
    KubeletConfiguration,
)
from pykubelet.pods.backoff import ExponentialBackoff

ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
AUTHENTICATED_GROUP = "system:authenticated"

TOKEN_REVIEWS_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

# Go's kubelet answers 401 with this body whatever failed (the reason goes to its log).
UNAUTHORIZED = "Unauthorized"
# Go's webhook authorizer does not cache a decision whose request-controlled attributes
# are this long or longer (maxControlledAttrCacheSize): a guard against filling the cache.
MAX_CACHED_ATTRIBUTES_SIZE = 10000
# k8s.io/apiserver DefaultAuthWebhookRetryBackoff: 500ms, x1.5, jitter 0.2, 5 attempts.
WEBHOOK_BACKOFF_INITIAL = 0.5
WEBHOOK_BACKOFF_FACTOR = 1.5
WEBHOOK_BACKOFF_JITTER = 0.2
WEBHOOK_ATTEMPTS = 5

_WEBSOCKET_BEARER_PREFIX = "base64url.bearer.authorization.k8s.io."


# --- who ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class User:
    """An authenticated identity (Go: user.Info)."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


ANONYMOUS = User(ANONYMOUS_USER, groups=(UNAUTHENTICATED_GROUP,))


def with_authenticated_group(user: User) -> User:
    """Go's AuthenticatedGroupAdder: every authenticated user is in system:authenticated."""
    if user.name == ANONYMOUS_USER or {AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP} & set(user.groups):
        return user
    return User(user.name, user.uid, (*user.groups, AUTHENTICATED_GROUP), user.extra)


# --- what: the request as the authorizer sees it ------------------------------------------


@dataclass(frozen=True)
class RequestAttributes:
    """One authorization question: may the user <verb> nodes/<subresource> <name>?"""

    verb: str
    subresource: str
    name: str  # the node's name
    path: str
    resource: str = "nodes"
    api_group: str = ""
    api_version: str = "v1"


# Go maps only these methods; any other (HEAD, OPTIONS, ...) gets an empty verb, which no
# RBAC rule grants (a "*" rule aside).
_VERBS = {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

# KubeletFineGrainedAuthz (beta, on by default since v1.33): these paths are asked about a
# subresource of their own first, then nodes/proxy.
_FINE_GRAINED = (("/pods", "pods"), ("/healthz", "healthz"), ("/configz", "configz"),
                 ("/statusz", "statusz"), ("/runningpods/", "pods"))  # fmt: skip
_SUBRESOURCES = (("/stats/", "stats"), ("/metrics", "metrics"), ("/logs/", "log"),
                 ("/checkpoint/", "checkpoint"))  # fmt: skip


def _is_subpath(path: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/")
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] == "/")


def request_attributes(method: str, path: str, node_name: str, *, fine_grained: bool = True
                       ) -> tuple[RequestAttributes, ...]:  # fmt: skip
    """Go's GetRequestAttributes: the questions to ask, in order; the request is allowed
    when any answer is yes. Only the method and the URL path count (not the query)."""
    verb = _VERBS.get(method.upper(), "")
    subresources: list[str] = []
    if fine_grained:
        subresources += [sub for prefix, sub in _FINE_GRAINED if _is_subpath(path, prefix)][:1]
    subresources.append(next((sub for prefix, sub in _SUBRESOURCES if _is_subpath(path, prefix)), "proxy"))
    return tuple(RequestAttributes(verb, sub, node_name, path) for sub in subresources)


def forbidden_message(user: User, attributes: Sequence[RequestAttributes]) -> str:
    """The 403 body: Go names the subresources asked about as a Go slice prints."""
    first = attributes[0]
    subresources = " ".join(a.subresource for a in attributes)
    return (f"Forbidden (user={user.name}, verb={first.verb}, resource={first.resource}, "
            f"subresource(s)=[{subresources}])\n")  # fmt: skip


def authorization_error_message(user: User, attributes: RequestAttributes) -> str:
    """The 500 body when the authorizer failed (the API server could not be asked)."""
    return (f"Authorization error (user={user.name}, verb={attributes.verb}, "
            f"resource={attributes.resource}, subresource={attributes.subresource})")


# --- credentials in a request --------------------------------------------------------------


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, as Go's bearertoken reads it."""
    parts = (authorization or "").strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


class BadCredentials(ValueError):
    """Credentials that are present but malformed: 401, never anonymous."""


def without_websocket_bearer_token(raw_headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers with the bearer-token subprotocol taken out of Sec-WebSocket-Protocol
    (Go's ProtocolAuthenticator removes it once it authenticated the request), so that the
    token is not passed on to the runtime's streaming server."""
    kept: list[tuple[bytes, bytes]] = []
    for name, value in raw_headers:
        if name.lower() == b"sec-websocket-protocol":
            protocols = [p.strip() for p in value.decode("latin-1").split(",")]
            protocols = [p for p in protocols if p and not p.startswith(_WEBSOCKET_BEARER_PREFIX)]
            if not protocols:
                continue
            value = ", ".join(protocols).encode("latin-1")
        kept.append((name, value))
    return kept


def websocket_bearer_token(raw_headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """A token sent as the WebSocket subprotocol `base64url.bearer.authorization.k8s.io.<b64>`
    (Go: websocket.ProtocolAuthenticator), for a WebSocket upgrade request only."""
    headers = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in raw_headers]
    connection = {t.strip().lower() for n, v in headers if n == "connection" for t in v.split(",")}
    upgrade = [v.strip().lower() for n, v in headers if n == "upgrade"]
    if "upgrade" not in connection or "websocket" not in upgrade:
        return None
    token, others = None, 0
    for name, value in headers:
        if name != "sec-websocket-protocol":
            continue
        for protocol in (p.strip() for p in value.split(",")):
            if not protocol.startswith(_WEBSOCKET_BEARER_PREFIX):
                others += 1
                continue
            if token is not None:
                raise BadCredentials("multiple base64.bearer.authorization tokens specified")
            encoded = protocol[len(_WEBSOCKET_BEARER_PREFIX):]
            try:
                raw = base64.b64decode(encoded + "=" * (-len(encoded) % 4), altchars=b"-_", validate=True)
                token = raw.decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                raise BadCredentials("invalid base64.bearer.authorization token encoding") from None
    if token and not others:  # one subprotocol must remain to be echoed back
        raise BadCredentials("missing additional subprotocol")
    return token or None


# --- x509 client certificates -----------------------------------------------------------


class CertificateRejected(ValueError):
    """A client certificate that does not authenticate anyone; str() says why (for the log)."""


# --- TokenReview and SubjectAccessReview ----------------------------------------------------


def token_review(token: str) -> dict[str, Any]:
    """The TokenReview the kubelet creates for a bearer token (no audiences, as Go's kubelet)."""
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}


def read_token_review(answer: Mapping[str, Any]) -> tuple[User | None, str]:
    """(the user, "") when the API server authenticated the token; (None, status.error)
    otherwise. An error is not an answer: Go does not cache it, and neither do we."""
    status = answer.get("status") or {}
    if not status.get("authenticated"):
        return None, str(status.get("error") or "")
    info = status.get("user") or {}
    extra = {str(k): tuple(v or ()) for k, v in (info.get("extra") or {}).items()}
    return User(str(info.get("username") or ""), str(info.get("uid") or ""),
                tuple(info.get("groups") or ()), extra), ""  # fmt: skip


def subject_access_review(user: User, attributes: RequestAttributes) -> dict[str, Any]:
    """The SubjectAccessReview Go's webhook authorizer creates for one question."""
    spec: dict[str, Any] = {
        "resourceAttributes": {
            "verb": attributes.verb,
            "group": attributes.api_group,
            "version": attributes.api_version,
            "resource": attributes.resource,
            "subresource": attributes.subresource,
            "name": attributes.name,
        },
        "user": user.name,
        "groups": list(user.groups),
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def review_cache_key(review: Mapping[str, Any]) -> bytes:
    """Go keys the authorizer's cache by the review's spec as JSON."""
    return msgspec.json.encode(review["spec"], order="deterministic")


def cacheable(attributes: RequestAttributes) -> bool:
    size = sum(len(v) for v in (attributes.verb, attributes.api_group, attributes.api_version,
                                attributes.resource, attributes.subresource, attributes.name,
                                attributes.path))  # fmt: skip
    return size < MAX_CACHED_ATTRIBUTES_SIZE


@dataclass(frozen=True)
class ReviewStatus:
    """A SubjectAccessReview's answer (status.allowed, status.denied, status.reason)."""

    allowed: bool
    denied: bool = False
    reason: str = ""


class ConflictingReview(ValueError):
    """The API server said both allowed and denied: Go treats it as an authorizer error."""


def read_subject_access_review(answer: Mapping[str, Any]) -> ReviewStatus:
    status = answer.get("status") or {}
    return ReviewStatus(bool(status.get("allowed")), bool(status.get("denied")), str(status.get("reason") or ""))


def decision(status: ReviewStatus) -> tuple[bool, str]:
    """(allowed, reason); an answer that is neither (NoOpinion) or denied is a no."""
    if status.allowed and status.denied:
        raise ConflictingReview("webhook subject access review returned both allow and deny response")
    return status.allowed, status.reason


def should_retry(status: int | None, reason: str, retry_after: float | None, connection_reset: bool) -> bool:
    """Go's webhook.DefaultShouldRetry: a reset connection, an InternalError or Timeout,
    429, or an answer that says when to retry. A refused connection or a timeout of our
    own is not retried."""
    return (connection_reset or reason in ("InternalError", "Timeout") or status == 429
            or retry_after is not None)  # fmt: skip


def webhook_backoff(jitter_source: Callable[[], float]) -> ExponentialBackoff:
    """The waits between the attempts of one review; `jitter_source` draws in [0, 1). No
    cap: WEBHOOK_ATTEMPTS bounds them (Go: Steps)."""
    return ExponentialBackoff(WEBHOOK_BACKOFF_INITIAL, math.inf, factor=WEBHOOK_BACKOFF_FACTOR,
                              jitter=WEBHOOK_BACKOFF_JITTER, random=jitter_source)


# --- the configuration ---------------------------------------------------------------------


def _given(path: str, explicit: Iterable[str]) -> bool:
    """Whether the field at this Go path was set: by a flag (its own path), or by a file
    section that holds it (a file sets whole sections: "authentication")."""
    return any(path == name or path.startswith(name + ".") for name in explicit)


def standalone_auth(config: KubeletConfiguration, explicit: Iterable[str] = ()) -> KubeletConfiguration:
    """The configuration to run without an API server (no --kubeconfig). Each of
    authentication.webhook.enabled, authentication.anonymous.enabled and
    authorization.mode that neither a file section nor a flag set takes the Go kubelet's
    command-line default (its applyLegacyDefaults: no token webhook, anonymous on,
    AlwaysAllow), since the v1beta1 defaults (webhooks) need an API server. `explicit` holds
    the Go names the file or flags set (LoadedConfiguration.explicit)."""
    explicit = set(explicit)
    authn, authz = config.authentication, config.authorization
    if not _given("authentication.webhook.enabled", explicit):
        authn = msgspec.structs.replace(authn, webhook=msgspec.structs.replace(authn.webhook, enabled=False))
    if not _given("authentication.anonymous.enabled", explicit):
        authn = msgspec.structs.replace(authn, anonymous=msgspec.structs.replace(authn.anonymous, enabled=True))
    if not _given("authorization.mode", explicit):
        authz = msgspec.structs.replace(authz, mode=AUTHORIZATION_MODE_ALWAYS_ALLOW)
    return msgspec.structs.replace(config, authentication=authn, authorization=authz)


def validate_auth(config: KubeletConfiguration, has_kubeconfig: bool) -> list[tuple[str, str]]:
    """What the Go kubelet refuses at startup in BuildAuth, as (Go field path, problem) like
    validate_kubelet_configuration. In standalone mode apply standalone_auth first."""
    problems: list[tuple[str, str]] = []
    authn, mode = config.authentication, config.authorization.mode
    if mode not in AUTHORIZATION_MODES:
        problems.append(("authorization.mode", f"{msgspec.json.encode(mode).decode()} is not an authorization "
                                               f"mode: use {AUTHORIZATION_MODE_WEBHOOK} or "
                                               f"{AUTHORIZATION_MODE_ALWAYS_ALLOW}"))  # fmt: skip
    if not has_kubeconfig and authn.webhook.enabled:
        problems.append(("authentication.webhook.enabled",
                         "true needs an API server to send TokenReviews to, and there is none in "
                         "standalone mode: set it to false, or give --kubeconfig"))  # fmt: skip
    if not has_kubeconfig and mode == AUTHORIZATION_MODE_WEBHOOK:
        problems.append(("authorization.mode",
                         f"{AUTHORIZATION_MODE_WEBHOOK} needs an API server to send SubjectAccessReviews "
                         f"to, and there is none in standalone mode: set it to "
                         f"{AUTHORIZATION_MODE_ALWAYS_ALLOW}, or give --kubeconfig"))  # fmt: skip
    if not (authn.x509.client_ca_file or authn.webhook.enabled or authn.anonymous.enabled):
        problems.append(("authentication",
                         "no authentication method configured: set x509.clientCAFile, enable "
                         "webhook (needs --kubeconfig), or enable anonymous"))  # fmt: skip
    return problems
