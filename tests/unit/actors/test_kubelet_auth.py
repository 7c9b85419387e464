"""KubeletAuth: client certificates, bearer tokens (TokenReview, cached), anonymous requests,
SubjectAccessReviews (cached per answer) and what the kubelet answers when the API server
fails, with a fake review client on trio's autojump clock; and once against the test API
server, the real peer."""

from __future__ import annotations

import base64
import logging
import sys
import time

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from pykubelet.actors.server.auth import AuthConfigurationError, KubeletAuth, WebhookError
from pykubelet.actors.server.http import Request
from pykubelet.messages.config import (
    KubeletAnonymousAuthentication,
    KubeletAuthentication,
    KubeletAuthorization,
    KubeletConfiguration,
    KubeletWebhookAuthentication,
    KubeletWebhookAuthorization,
    KubeletX509Authentication,
)
from pykubelet.pods.kubelet_auth import SUBJECT_ACCESS_REVIEWS_PATH, TOKEN_REVIEWS_PATH, User, request_attributes
from pykubelet.ports.apiserver import ApiClient, load_kubeconfig
from pykubelet.ports.apiserver.errors import unavailable
from tests.support.api_fakes import api_error
from tests.support.apiserver.pki import CertificateAuthority

NODE = "node1"
TOKEN = "s3cret-bearer-token-value"


class FakeReviews:
    """The review client: answers from `tokens` ({token: (user, groups)}) and `allow`
    ({(user, subresource)}), or raises what `fail` holds for the next calls."""

    def __init__(self) -> None:
        self.tokens: dict[str, tuple[str, list[str]]] = {}
        self.allow: set[tuple[str, str]] = set()
        self.fail: dict[str, list[BaseException]] = {}  # by path: raised by the next calls
        self.calls: list[tuple[str, dict]] = []
        self.token_error = ""
        self.both = False

    async def create(self, path: str, body: dict) -> dict:
        self.calls.append((path, body))
        if self.fail.get(path):
            raise self.fail[path].pop(0)
        if path == TOKEN_REVIEWS_PATH:
            known = self.tokens.get(body["spec"]["token"])
            if known is None:
                return {"status": {"user": {}, **({"error": self.token_error} if self.token_error else {})}}
            return {"status": {"authenticated": True, "user": {"username": known[0], "groups": known[1]}}}
        assert path == SUBJECT_ACCESS_REVIEWS_PATH
        spec = body["spec"]
        allowed = (spec["user"], spec["resourceAttributes"]["subresource"]) in self.allow
        return {"status": {"allowed": allowed, **({"denied": True} if self.both else {})}}

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.calls if p == path)


def config(*, ca_file: str = "", webhook: bool = True, anonymous: bool = False, mode: str = "Webhook",
           cache_ttl: float = 120, allowed_ttl: float = 300, denied_ttl: float = 30) -> KubeletConfiguration:
    return KubeletConfiguration(
        authentication=KubeletAuthentication(
            x509=KubeletX509Authentication(client_ca_file=ca_file),
            webhook=KubeletWebhookAuthentication(enabled=webhook, cache_ttl=cache_ttl),
            anonymous=KubeletAnonymousAuthentication(enabled=anonymous)),
        authorization=KubeletAuthorization(mode=mode, webhook=KubeletWebhookAuthorization(
            cache_authorized_ttl=allowed_ttl, cache_unauthorized_ttl=denied_ttl)),
    )


def request(path: str = "/exec/default/web/main", method: str = "POST", *, token: str | None = None,
            cert: bytes | None = None, raw_headers: list[tuple[bytes, bytes]] | None = None) -> Request:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return Request(method=method, path=path, query={}, headers=headers, raw_headers=raw_headers or [],
                   peer_certificate=cert)


def der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)


@pytest.fixture
def ca() -> CertificateAuthority:
    return CertificateAuthority("kubelet-client-ca")


@pytest.fixture
def reviews() -> FakeReviews:
    return FakeReviews()


def auth(reviews: FakeReviews | None, cfg: KubeletConfiguration, **kw) -> KubeletAuth:
    return KubeletAuth(cfg, node_name=NODE, api=reviews, jitter=lambda: 0.0, **kw)


# --- x509 -------------------------------------------------------------------------------------


async def test_a_client_certificate_from_the_client_ca_authenticates_cn_and_organizations(ca, tmp_path):
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    kubelet = auth(None, config(ca_file=str(ca_file), webhook=False, mode="AlwaysAllow"))
    cert, _ = ca.issue("apiserver-kubelet-client", ("system:masters",))
    user = await kubelet.authenticate(request(cert=der(cert)))
    assert user == User("apiserver-kubelet-client", groups=("system:masters", "system:authenticated"))
    assert await kubelet.check(request(cert=der(cert))) is None


async def test_a_certificate_of_another_ca_or_expired_is_401_even_with_anonymous_on(ca, caplog):
    kubelet = auth(None, config(webhook=False, anonymous=True, mode="AlwaysAllow"), client_ca=[ca.cert])
    foreign, _ = CertificateAuthority("kubelet-client-ca").issue("mallory")
    expired, _ = ca.issue("alice", expired=True)
    for cert in (foreign, expired):
        answer = await kubelet.check(request(cert=der(cert)))
        assert (answer.status, answer.body) == (401, b"Unauthorized")
    assert "signed by unknown authority" in caplog.text


async def test_the_certificate_validity_is_judged_on_the_wall_clock(ca):
    cert, _ = ca.issue("alice")  # valid for a day from now
    later = auth(None, config(ca_file="ca.crt", webhook=False, mode="AlwaysAllow"), client_ca=[ca.cert],
                 wall_clock=lambda: time.time() + 2 * 86400)
    assert await later.authenticate(request(cert=der(cert))) is None


async def test_without_a_client_ca_a_certificate_is_not_looked_at(ca):
    cert, _ = ca.issue("alice")
    kubelet = auth(None, config(webhook=False, anonymous=True, mode="AlwaysAllow"))
    assert await kubelet.authenticate(request(cert=der(cert))) == User("system:anonymous", groups=("system:unauthenticated",))


def test_an_unreadable_client_ca_file_is_a_configuration_error(tmp_path):
    with pytest.raises(AuthConfigurationError, match=r"authentication.x509.clientCAFile .*missing.crt: cannot read"):
        auth(None, config(ca_file=str(tmp_path / "missing.crt"), webhook=False, mode="AlwaysAllow"))
    junk = tmp_path / "junk.crt"
    junk.write_text("not a certificate")
    with pytest.raises(AuthConfigurationError, match="not a PEM bundle"):
        auth(None, config(ca_file=str(junk), webhook=False, mode="AlwaysAllow"))



def test_a_client_ca_without_cryptography_is_a_configuration_error_naming_the_package(tmp_path, monkeypatch, ca):
    bundle = tmp_path / "ca.crt"
    bundle.write_bytes(ca.cert_pem)
    monkeypatch.setitem(sys.modules, "cryptography", None)  # as if it were not installed
    with pytest.raises(AuthConfigurationError, match=r"clientCAFile .*ca.crt: client certificates need the "
                                                     r"cryptography package, which cannot be imported"):
        auth(None, config(ca_file=str(bundle), webhook=False, mode="AlwaysAllow"))


@pytest.mark.parametrize(
    "cfg, words",
    [
        (config(mode="AlwaysAllow"), "authentication.webhook.enabled: true needs an API server"),
        (config(webhook=False, anonymous=True), "authorization.mode: Webhook needs an API server"),
        (config(webhook=False, mode="AlwaysAllow"), "no authentication method configured"),
    ],
)
def test_webhooks_without_an_api_client_are_refused_at_construction(cfg, words):
    with pytest.raises(AuthConfigurationError, match=words):
        auth(None, cfg)


# --- bearer tokens -----------------------------------------------------------------------------


async def test_a_token_is_reviewed_once_and_cached_for_cache_ttl(reviews, autojump_clock):
    reviews.tokens[TOKEN] = ("alice", ["dev"])
    kubelet = auth(reviews, config(mode="AlwaysAllow", cache_ttl=120))
    assert await kubelet.authenticate(request(token=TOKEN)) == User("alice", groups=("dev", "system:authenticated"))
    await trio.sleep(119)
    assert (await kubelet.authenticate(request(token=TOKEN))).name == "alice"
    assert reviews.count(TOKEN_REVIEWS_PATH) == 1
    assert reviews.calls[0][1] == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                   "spec": {"token": TOKEN}}
    reviews.tokens.clear()  # revoked: seen once the cached answer expires
    await trio.sleep(1)
    assert await kubelet.authenticate(request(token=TOKEN)) is None
    assert reviews.count(TOKEN_REVIEWS_PATH) == 2


async def test_an_unknown_token_is_401_and_the_no_is_cached_too(reviews, autojump_clock):
    kubelet = auth(reviews, config(mode="AlwaysAllow", anonymous=True))
    for _ in range(2):
        answer = await kubelet.check(request(token=TOKEN))
        assert (answer.status, answer.body) == (401, b"Unauthorized")
    assert reviews.count(TOKEN_REVIEWS_PATH) == 1


async def test_a_review_with_an_error_is_not_cached(reviews, autojump_clock):
    reviews.token_error = "invalid bearer token"
    kubelet = auth(reviews, config(mode="AlwaysAllow"))
    assert await kubelet.authenticate(request(token=TOKEN)) is None
    assert await kubelet.authenticate(request(token=TOKEN)) is None
    assert reviews.count(TOKEN_REVIEWS_PATH) == 2


async def test_the_token_never_appears_in_the_log(reviews, autojump_clock, caplog):
    caplog.set_level(logging.DEBUG)
    reviews.token_error = "invalid bearer token"
    kubelet = auth(reviews, config(mode="AlwaysAllow"))
    await kubelet.check(request(token=TOKEN))
    reviews.fail[TOKEN_REVIEWS_PATH] = [api_error(500, "InternalError", method="POST", path=TOKEN_REVIEWS_PATH)] * 5
    await kubelet.check(request(token=TOKEN))
    assert "unable to authenticate" in caplog.text
    assert TOKEN not in caplog.text


async def test_a_failing_token_review_is_401_after_go_retries(reviews, autojump_clock):
    reviews.tokens[TOKEN] = ("alice", [])
    reviews.fail[TOKEN_REVIEWS_PATH] = [api_error(500, "InternalError", method="POST", path=TOKEN_REVIEWS_PATH)] * 5
    kubelet = auth(reviews, config(mode="AlwaysAllow"))
    start = trio.current_time()
    answer = await kubelet.check(request(token=TOKEN))
    assert answer.status == 401
    assert reviews.count(TOKEN_REVIEWS_PATH) == 5
    assert trio.current_time() - start == pytest.approx(0.5 + 0.75 + 1.125 + 1.6875)
    assert await kubelet.check(request(token=TOKEN)) is None  # the API server is back: not cached


async def test_a_websocket_subprotocol_token_authenticates(reviews):
    reviews.tokens[TOKEN] = ("alice", [])
    encoded = base64.urlsafe_b64encode(TOKEN.encode()).decode().rstrip("=")
    headers = [(b"Connection", b"Upgrade"), (b"Upgrade", b"websocket"),
               (b"Sec-WebSocket-Protocol", f"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.{encoded}".encode())]
    kubelet = auth(reviews, config(mode="AlwaysAllow"))
    assert (await kubelet.authenticate(request(method="GET", raw_headers=headers))).name == "alice"


async def test_without_the_token_webhook_a_bearer_token_is_ignored(reviews):
    kubelet = auth(reviews, config(webhook=False, anonymous=True))
    assert (await kubelet.authenticate(request(token=TOKEN))).name == "system:anonymous"
    assert reviews.calls == []


# --- anonymous ------------------------------------------------------------------------------------


async def test_no_credentials_is_anonymous_when_enabled_and_401_otherwise(reviews):
    reviews.allow.add(("system:anonymous", "healthz"))
    on = auth(reviews, config(anonymous=True))
    assert await on.check(request("/healthz", "GET")) is None
    sent = reviews.calls[-1][1]["spec"]
    assert (sent["user"], sent["groups"]) == ("system:anonymous", ["system:unauthenticated"])
    off = auth(reviews, config(anonymous=False))
    assert (await off.check(request("/healthz", "GET"))).status == 401


# --- authorization -----------------------------------------------------------------------------


async def test_an_allowed_answer_is_cached_for_cache_authorized_ttl(reviews, autojump_clock):
    reviews.tokens[TOKEN] = ("alice", [])
    reviews.allow.add(("alice", "proxy"))
    kubelet = auth(reviews, config(allowed_ttl=300, denied_ttl=30))
    assert await kubelet.check(request(token=TOKEN)) is None
    reviews.allow.clear()
    await trio.sleep(299)
    assert await kubelet.check(request(token=TOKEN)) is None  # still the cached yes (token cached 2m: reviewed again)
    assert reviews.count(SUBJECT_ACCESS_REVIEWS_PATH) == 1
    await trio.sleep(1)
    assert (await kubelet.check(request(token=TOKEN))).status == 403
    assert reviews.count(SUBJECT_ACCESS_REVIEWS_PATH) == 2


async def test_a_denied_answer_is_403_and_cached_for_cache_unauthorized_ttl(reviews, autojump_clock):
    reviews.tokens[TOKEN] = ("alice", ["dev"])
    kubelet = auth(reviews, config(allowed_ttl=300, denied_ttl=30))
    answer = await kubelet.check(request(token=TOKEN))
    assert (answer.status, answer.body.decode()) == (
        403, "Forbidden (user=alice, verb=create, resource=nodes, subresource(s)=[proxy])\n")
    assert answer.content_type.startswith("text/plain")
    reviews.allow.add(("alice", "proxy"))
    await trio.sleep(29)
    assert (await kubelet.check(request(token=TOKEN))).status == 403
    await trio.sleep(1)
    assert await kubelet.check(request(token=TOKEN)) is None
    assert reviews.count(SUBJECT_ACCESS_REVIEWS_PATH) == 2


async def test_the_review_asks_about_the_node_for_the_authenticated_user(reviews):
    reviews.tokens[TOKEN] = ("alice", ["dev"])
    await auth(reviews, config()).check(request("/stats/summary", "GET", token=TOKEN))
    assert reviews.calls[-1] == (SUBJECT_ACCESS_REVIEWS_PATH, {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "get", "group": "", "version": "v1", "resource": "nodes",
                                        "subresource": "stats", "name": NODE},
                 "user": "alice", "groups": ["dev", "system:authenticated"]}})


@pytest.mark.parametrize(
    "allowed, asked, passes",
    [
        (set(), ["pods", "proxy"], False),
        ({"proxy"}, ["pods", "proxy"], True),
        ({"pods"}, ["pods"], True),
    ],
)
async def test_fine_grained_paths_ask_their_own_subresource_then_proxy(reviews, allowed, asked, passes):
    reviews.tokens[TOKEN] = ("alice", [])
    reviews.allow = {("alice", sub) for sub in allowed}
    answer = await auth(reviews, config()).check(request("/pods", "GET", token=TOKEN))
    if passes:
        assert answer is None
    else:
        assert answer.body == b"Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
    sent = [b["spec"]["resourceAttributes"]["subresource"] for p, b in reviews.calls if p == SUBJECT_ACCESS_REVIEWS_PATH]
    assert sent == asked


async def test_always_allow_asks_nobody(reviews):
    reviews.tokens[TOKEN] = ("alice", [])
    assert await auth(reviews, config(mode="AlwaysAllow")).check(request(token=TOKEN)) is None
    assert reviews.count(SUBJECT_ACCESS_REVIEWS_PATH) == 0


async def test_an_unreachable_authorizer_is_500_authorization_error_not_403(reviews, autojump_clock):
    reviews.tokens[TOKEN] = ("alice", [])
    reset = ConnectionResetError(104, "Connection reset by peer")
    try:
        raise unavailable(reset, method="POST", path=SUBJECT_ACCESS_REVIEWS_PATH, url="https://x") from reset
    except Exception as exc:
        failure = exc
    reviews.fail[SUBJECT_ACCESS_REVIEWS_PATH] = [failure] * 5
    kubelet = auth(reviews, config())
    answer = await kubelet.check(request(token=TOKEN))
    assert (answer.status, answer.body.decode()) == (
        500, "Authorization error (user=alice, verb=create, resource=nodes, subresource=proxy)")
    assert reviews.count(SUBJECT_ACCESS_REVIEWS_PATH) == 5  # a reset connection is retried
    reviews.allow.add(("alice", "proxy"))
    assert await kubelet.check(request(token=TOKEN)) is None  # failures are not cached


async def test_a_refusal_to_review_is_not_retried(reviews, autojump_clock):
    reviews.tokens[TOKEN] = ("alice", [])
    reviews.fail[SUBJECT_ACCESS_REVIEWS_PATH] = [api_error(403, "Forbidden", "cannot create subjectaccessreviews", method="POST",
                              path=SUBJECT_ACCESS_REVIEWS_PATH)]
    answer = await auth(reviews, config()).check(request(token=TOKEN))
    assert answer.status == 500 and reviews.count(SUBJECT_ACCESS_REVIEWS_PATH) == 1


async def test_a_throttled_review_is_retried_after_500ms(reviews, autojump_clock):
    reviews.tokens[TOKEN] = ("alice", [])
    reviews.allow.add(("alice", "proxy"))
    reviews.fail[SUBJECT_ACCESS_REVIEWS_PATH] = [api_error(429, "TooManyRequests", method="POST", path=SUBJECT_ACCESS_REVIEWS_PATH)]
    kubelet = auth(reviews, config())
    await kubelet.authenticate(request(token=TOKEN))  # the token review first, outside the timing
    start = trio.current_time()
    assert await kubelet.check(request(token=TOKEN)) is None
    assert trio.current_time() - start == pytest.approx(0.5)


async def test_allowed_and_denied_at_once_is_an_authorization_error(reviews):
    reviews.allow.add(("alice", "proxy"))
    reviews.both = True
    kubelet = auth(reviews, config())
    with pytest.raises(WebhookError, match="both allow and deny"):
        await kubelet.authorize(User("alice"), request_attributes("POST", "/exec/a/b/c", NODE)[0])


# --- against the test API server ---------------------------------------------------------------


async def test_against_the_test_api_server_tokens_and_grants_decide(apiserver):
    """The real peer: the node's own credentials create the reviews."""
    credentials = load_kubeconfig(str(apiserver.kubeconfig("system:node:node1")))
    token = apiserver.add_token("alice")
    async with ApiClient(credentials) as api:
        kubelet = KubeletAuth(config(), node_name=NODE, api=api)
        assert (await kubelet.check(request("/stats/summary", "GET", token="unknown"))).status == 401
        assert (await kubelet.check(request("/stats/summary", "GET", token=token))).body == (
            b"Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[stats])\n")
        apiserver.grant("alice", verbs=["get"], resources=["nodes/stats"])
        fresh = KubeletAuth(config(), node_name=NODE, api=api)  # the 30s "no" is cached in the first
        assert await fresh.check(request("/stats/summary", "GET", token=token)) is None
    made = [r.resource for r in apiserver.requests(user="system:node:node1")]
    assert made.count("tokenreviews") == 3 and made.count("subjectaccessreviews") == 2
