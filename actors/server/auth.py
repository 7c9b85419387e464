"""KubeletAuth: authentication and authorization of the kubelet API (Go: the kubelet's
BuildAuth and its server's auth filter). Client certificates are checked against
authentication.x509.clientCAFile, bearer tokens with TokenReviews and requests with
SubjectAccessReviews to the API server (the node's own credentials), each answer cached
for its TTL.

The kubelet API routes call check(request) before serving; decisions are pods/kubelet_auth.py's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import trio

from pykubelet.messages.config import AUTHORIZATION_MODE_ALWAYS_ALLOW, AUTHORIZATION_MODE_WEBHOOK, KubeletConfiguration
from pykubelet.pods.kubelet_auth import (
    ANONYMOUS,
    SUBJECT_ACCESS_REVIEWS_PATH,
    TOKEN_REVIEWS_PATH,
    UNAUTHORIZED,
    WEBHOOK_ATTEMPTS,
    BadCredentials,
    CertificateRejected,
    ConflictingReview,
    RequestAttributes,
    ReviewStatus,
    User,
    authorization_error_message,
    bearer_token,
    cacheable,
    decision,
    forbidden_message,
    read_subject_access_review,
    read_token_review,
    request_attributes,
    review_cache_key,
    should_retry,
    subject_access_review,
    token_review,
    validate_auth,
    webhook_backoff,
    websocket_bearer_token,
    with_authenticated_group,
)
from pykubelet.ports.apiserver.errors import ApiError, ApiUnavailable
from pykubelet.supervisor.verbosity import V

from .http import Request, Response

if TYPE_CHECKING:
    from cryptography import x509

log = logging.getLogger("pykubelet.server.auth")

CACHE_SIZE = 4096  # entries per cache; expired ones go first, then the oldest
LOG_INTERVAL = 60.0  # seconds between two log lines about the same kind of failure

K = TypeVar("K")
Value = TypeVar("Value")


class AuthConfigurationError(ValueError):
    """The authentication/authorization settings cannot work; str() names the field and fix."""


class WebhookError(Exception):
    """The API server could not answer a review (after Go's retries); str() says why."""


class ReviewClient(Protocol):
    """What KubeletAuth needs of the API client (ports/apiserver ApiClient has it)."""

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]: ...


@dataclass
class _Entry(Generic[Value]):
    value: Value
    expires: float


class _TtlCache(Generic[K, Value]):
    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._entries: dict[K, _Entry[Value]] = {}
        self._size = size

    def get(self, key: K, now: float) -> _Entry[Value] | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expires <= now:
            del self._entries[key]
            return None
        return entry

    def put(self, key: K, value: Value, expires: float, now: float) -> None:
        self._entries.pop(key, None)
        if len(self._entries) >= self._size:
            for old in [k for k, e in self._entries.items() if e.expires <= now]:
                del self._entries[old]
            while len(self._entries) >= self._size:
                del self._entries[next(iter(self._entries))]
        self._entries[key] = _Entry(value, expires)


def load_client_ca(path: str) -> list[x509.Certificate]:
    """The certificates of a PEM bundle (authentication.x509.clientCAFile). cryptography is
    imported here, not with the module: a kubelet without a client CA never needs it."""
    where = f"authentication.x509.clientCAFile {path}"
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise AuthConfigurationError(f"{where}: cannot read: {exc.strerror or exc}; fix the path") from None
    try:
        from cryptography import x509
    except ImportError as exc:
        raise AuthConfigurationError(f"{where}: client certificates need the cryptography package, which "
                                     f"cannot be imported ({exc}): install it") from None
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise AuthConfigurationError(f"{where}: not a PEM bundle of CA certificates ({exc}); "
                                     "give the CA that signs client certificates") from None
    return certificates


class KubeletAuth:
    """Authentication and authorization for one node's kubelet API.

    `api` creates TokenReviews and SubjectAccessReviews with the node's credentials; None in
    standalone mode (then neither webhook may be on). `client_ca` replaces reading
    clientCAFile. `clock` (trio's, so MockClock drives the cache TTLs) and `wall_clock`
    (unix seconds, for certificate validity) are the two times; `sleep` and `jitter` drive
    the webhook retries.
    """

    def __init__(
        self,
        config: KubeletConfiguration,
        *,
        node_name: str,
        api: ReviewClient | None,
        client_ca: Sequence[x509.Certificate] | None = None,
        fine_grained: bool = True,
        clock: Callable[[], float] = trio.current_time,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = trio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        problems = validate_auth(config, has_kubeconfig=api is not None)
        if problems:
            raise AuthConfigurationError("; ".join(f"{field}: {problem}" for field, problem in problems))
        authn, authz = config.authentication, config.authorization
        self.node_name = node_name
        self.fine_grained = fine_grained
        self._api = api
        ca_file = authn.x509.client_ca_file
        self._roots: Sequence[x509.Certificate] = (
            client_ca if client_ca is not None else load_client_ca(ca_file) if ca_file else ())
        if self._roots:  # cryptography is loaded already: the roots are its certificates
            from pykubelet.pods.client_certificate import verify_client_certificate

            self._verify_certificate = verify_client_certificate
        self._token_webhook = authn.webhook.enabled
        self._token_ttl = float(authn.webhook.cache_ttl)
        self._anonymous = authn.anonymous.enabled
        self._always_allow = authz.mode == AUTHORIZATION_MODE_ALWAYS_ALLOW
        assert self._always_allow or authz.mode == AUTHORIZATION_MODE_WEBHOOK
        self._allowed_ttl = float(authz.webhook.cache_authorized_ttl)
        self._denied_ttl = float(authz.webhook.cache_unauthorized_ttl)
        self._clock, self._wall_clock, self._sleep, self._jitter = clock, wall_clock, sleep, jitter
        self._token_key = os.urandom(32)  # tokens are cached under an HMAC, never as text
        self._tokens: _TtlCache[bytes, User | None] = _TtlCache()
        self._reviews: _TtlCache[bytes, ReviewStatus] = _TtlCache()
        self._logged: dict[str, float] = {}

    # --- the filter ------------------------------------------------------------------------

    async def check(self, request: Request) -> Response | None:
        """Go's auth filter: None when the request may go on to its route, else the answer:
        401 "Unauthorized", 403 "Forbidden (user=..., ...)" or 500 "Authorization error (...)"."""
        user = await self.authenticate(request)
        if user is None:
            return Response.text(401, UNAUTHORIZED)
        questions = request_attributes(request.method, request.path, self.node_name, fine_grained=self.fine_grained)
        for attributes in questions:
            try:
                allowed, _ = await self.authorize(user, attributes)
            except WebhookError as exc:
                self._log("authorize", f"authorization error for {user.name} {attributes.verb} "
                                       f"nodes/{attributes.subresource}: {exc}")  # fmt: skip
                return Response.text(500, authorization_error_message(user, attributes))
            if allowed:
                return None
        log.log(V(4), "forbidden", extra={"user": user.name, "verb": questions[0].verb, "path": request.path})
        return Response.text(403, forbidden_message(user, questions))

    # --- authentication --------------------------------------------------------------------

    async def authenticate(self, request: Request) -> User | None:
        """The request's user, or None (401). Go's order: the client certificate, then a
        bearer token, then a WebSocket token; any failure among them is a 401 even when
        anonymous requests are allowed; a request with no credentials is system:anonymous
        when they are."""
        failures: list[str] = []
        if self._roots and request.peer_certificate:
            now = dt.datetime.fromtimestamp(self._wall_clock(), dt.timezone.utc)
            try:
                user = self._verify_certificate(request.peer_certificate, self._roots, now)
            except CertificateRejected as exc:
                failures.append(f"x509: {exc}")
            else:
                if user is not None:
                    return with_authenticated_group(user)
        if self._token_webhook:
            tokens = [bearer_token(request.headers.get("authorization"))]
            try:
                tokens.append(websocket_bearer_token(request.raw_headers))
            except BadCredentials as exc:
                failures.append(f"websocket: {exc}")
            for token in filter(None, tokens):
                try:
                    user = await self._review_token(token)
                except WebhookError as exc:
                    failures.append(f"token review failed: {exc}")
                    continue
                if user is not None:
                    return with_authenticated_group(user)
                failures.append("invalid bearer token")
        if failures:
            self._log("authenticate", f"unable to authenticate the request to {request.path}: {'; '.join(failures)}")
            return None
        return ANONYMOUS if self._anonymous else None

    async def _review_token(self, token: str) -> User | None:
        key = hmac.new(self._token_key, token.encode(), hashlib.sha256).digest()
        cached = self._tokens.get(key, self._clock())
        if cached is not None:
            return cached.value
        answer = await self._webhook(TOKEN_REVIEWS_PATH, token_review(token))
        user, error = read_token_review(answer)
        if error:
            raise WebhookError(f"the API server did not authenticate the token: {error}")
        now = self._clock()
        self._tokens.put(key, user, now + self._token_ttl, now)
        return user

    # --- authorization ---------------------------------------------------------------------

    async def authorize(self, user: User, attributes: RequestAttributes) -> tuple[bool, str]:
        """(allowed, reason) for one question; WebhookError when the API server could not
        be asked (the kubelet answers 500, as Go does, not 403)."""
        if self._always_allow:
            return True, ""
        review = subject_access_review(user, attributes)
        key = review_cache_key(review)
        cached = self._reviews.get(key, self._clock())
        if cached is not None:
            status = cached.value
        else:
            status = read_subject_access_review(await self._webhook(SUBJECT_ACCESS_REVIEWS_PATH, review))
            if cacheable(attributes):
                now = self._clock()
                ttl = self._allowed_ttl if status.allowed else self._denied_ttl
                self._reviews.put(key, status, now + ttl, now)
        try:
            return decision(status)
        except ConflictingReview as exc:
            raise WebhookError(str(exc)) from None

    # --- the API server ---------------------------------------------------------------------

    async def _webhook(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a review with Go's retries (5 attempts, 0.5 s x1.5 with 20% jitter)."""
        assert self._api is not None  # validate_auth refused webhooks without a client
        backoff = webhook_backoff(self._jitter)
        for attempt in range(WEBHOOK_ATTEMPTS):
            try:
                answer = await self._api.create(path, body)
            except ApiError as exc:
                if attempt == WEBHOOK_ATTEMPTS - 1 or not _retriable(exc):
                    raise WebhookError(str(exc)) from exc
            else:
                if not isinstance(answer, dict):
                    raise WebhookError(f"POST {path}: the answer is not an object: {answer!r:.200}")
                return answer
            await self._sleep(backoff.next_delay())
        raise AssertionError("unreachable")

    def _log(self, kind: str, message: str) -> None:
        now = self._clock()
        if now - self._logged.get(kind, -LOG_INTERVAL) >= LOG_INTERVAL:
            self._logged[kind] = now
            log.warning(message)


def _retriable(exc: ApiError) -> bool:
    reset = isinstance(exc, ApiUnavailable) and _connection_reset(exc)
    return should_retry(exc.status, exc.reason, exc.retry_after, reset)


def _connection_reset(exc: BaseException) -> bool:
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionResetError):
            return True
        stack += [e.__cause__, e.__context__]
    return False
