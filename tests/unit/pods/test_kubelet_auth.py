"""The kubelet API's authorization attributes, credentials, client certificates, reviews and
configuration checks, as Go's kubelet decides them (pkg/kubelet/server/auth.go, server.go,
k8s.io/apiserver authenticators and webhook authorizer)."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubelet.messages.config import (
    KubeletAnonymousAuthentication,
    KubeletAuthentication,
    KubeletAuthorization,
    KubeletConfiguration,
    KubeletWebhookAuthentication,
    KubeletX509Authentication,
)
from pykubelet.pods.client_certificate import verify_client_certificate
from pykubelet.pods.kubelet_auth import (
    ANONYMOUS,
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
    standalone_auth,
    subject_access_review,
    token_review,
    validate_auth,
    webhook_backoff,
    websocket_bearer_token,
    with_authenticated_group,
)

NOW = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
DAY = dt.timedelta(days=1)


# --- request attributes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, path, verb, subresources",
    [
        ("GET", "/pods", "get", ["pods", "proxy"]),
        ("GET", "/pods/", "get", ["pods", "proxy"]),
        ("GET", "/runningpods/", "get", ["pods", "proxy"]),
        ("GET", "/healthz", "get", ["healthz", "proxy"]),
        ("GET", "/healthz/syncloop", "get", ["healthz", "proxy"]),
        ("GET", "/configz", "get", ["configz", "proxy"]),
        ("GET", "/statusz", "get", ["statusz", "proxy"]),
        ("GET", "/stats/summary", "get", ["stats"]),
        ("GET", "/stats", "get", ["stats"]),
        ("GET", "/metrics", "get", ["metrics"]),
        ("GET", "/metrics/cadvisor", "get", ["metrics"]),
        ("GET", "/metrics/probes", "get", ["metrics"]),
        ("GET", "/logs/syslog", "get", ["log"]),
        ("POST", "/checkpoint/ns/pod/c", "create", ["checkpoint"]),
        ("GET", "/containerLogs/ns/pod/c", "get", ["proxy"]),  # /logs/ is the node's logs
        ("POST", "/exec/ns/pod/c", "create", ["proxy"]),
        ("GET", "/exec/ns/pod/c", "get", ["proxy"]),  # WebSocket exec: a GET, so "get"
        ("POST", "/attach/ns/pod/c", "create", ["proxy"]),
        ("POST", "/portForward/ns/pod", "create", ["proxy"]),
        ("POST", "/run/ns/pod/c", "create", ["proxy"]),
        ("GET", "/spec/", "get", ["proxy"]),  # no spec subresource in Go any more
        ("GET", "/", "get", ["proxy"]),
        ("GET", "/podsx", "get", ["proxy"]),  # a subpath, not a prefix
        ("GET", "/statsx", "get", ["proxy"]),
        ("GET", "/metricsfoo", "get", ["proxy"]),
        ("PUT", "/pods", "update", ["pods", "proxy"]),
        ("PATCH", "/configz", "patch", ["configz", "proxy"]),
        ("DELETE", "/stats/x", "delete", ["stats"]),
        ("HEAD", "/healthz", "", ["healthz", "proxy"]),  # Go maps no verb for HEAD
        ("OPTIONS", "/pods", "", ["pods", "proxy"]),
    ],
)
def test_request_attributes_map_paths_to_node_subresources_as_go(method, path, verb, subresources):
    attrs = request_attributes(method, path, "node1")
    assert [a.subresource for a in attrs] == subresources
    assert {(a.verb, a.resource, a.name, a.api_group, a.api_version, a.path) for a in attrs} == {
        (verb, "nodes", "node1", "", "v1", path)
    }


@pytest.mark.parametrize("path, subresources", [("/pods", ["proxy"]), ("/healthz", ["proxy"]),
                                                ("/stats/summary", ["stats"])])
def test_without_fine_grained_authz_only_the_old_subresources_remain(path, subresources):
    assert [a.subresource for a in request_attributes("GET", path, "n", fine_grained=False)] == subresources


def test_forbidden_message_lists_every_subresource_asked_as_go_prints_a_slice():
    alice = User("alice", groups=("system:authenticated",))
    assert forbidden_message(alice, request_attributes("GET", "/pods", "node1")) == (
        "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n")
    assert forbidden_message(alice, request_attributes("POST", "/exec/a/b/c", "node1")) == (
        "Forbidden (user=alice, verb=create, resource=nodes, subresource(s)=[proxy])\n")


def test_authorization_error_message_names_the_question_that_failed():
    attrs = request_attributes("GET", "/stats/summary", "node1")[0]
    assert authorization_error_message(User("bob"), attrs) == (
        "Authorization error (user=bob, verb=get, resource=nodes, subresource=stats)")


# --- credentials ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header, token",
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("  Bearer abc  ", "abc"),
        ("Bearer abc extra", "abc"),
        ("Bearer", None),
        ("Bearer  abc", None),  # Go splits on single spaces: an empty token
        ("Basic dXNlcjpwYXNz", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token_is_read_as_go_reads_it(header, token):
    assert bearer_token(header) == token


def _ws(*protocols: str, upgrade: bool = True) -> list[tuple[bytes, bytes]]:
    headers = [(b"connection", b"Upgrade"), (b"upgrade", b"websocket")] if upgrade else []
    return headers + [(b"sec-websocket-protocol", p.encode()) for p in protocols]


def _b64(token: str) -> str:
    return base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


def test_websocket_token_comes_from_the_bearer_subprotocol():
    proto = f"base64url.bearer.authorization.k8s.io.{_b64('s3cret-token')}"
    assert websocket_bearer_token(_ws(f"v5.channel.k8s.io, {proto}")) == "s3cret-token"
    assert websocket_bearer_token(_ws("v5.channel.k8s.io", proto)) == "s3cret-token"
    assert websocket_bearer_token(_ws("v5.channel.k8s.io")) is None
    assert websocket_bearer_token(_ws(proto, "v4.channel.k8s.io", upgrade=False)) is None  # not an upgrade


@pytest.mark.parametrize(
    "protocols, problem",
    [
        ([f"base64url.bearer.authorization.k8s.io.{_b64('a')}"], "missing additional subprotocol"),
        ([f"base64url.bearer.authorization.k8s.io.{_b64('a')}", f"base64url.bearer.authorization.k8s.io.{_b64('b')}",
          "v5.channel.k8s.io"], "multiple"),
        (["base64url.bearer.authorization.k8s.io.!!!", "v5.channel.k8s.io"], "encoding"),
    ],
)
def test_malformed_websocket_tokens_are_bad_credentials(protocols, problem):
    with pytest.raises(BadCredentials, match=problem):
        websocket_bearer_token(_ws(*protocols))


def test_authenticated_users_join_system_authenticated_once():
    assert with_authenticated_group(User("alice", groups=("dev",))).groups == ("dev", "system:authenticated")
    assert with_authenticated_group(User("a", groups=("system:authenticated",))).groups == ("system:authenticated",)
    assert with_authenticated_group(ANONYMOUS) == ANONYMOUS
    assert ANONYMOUS == User("system:anonymous", groups=("system:unauthenticated",))


# --- client certificates -------------------------------------------------------------------------


def _name(cn: str | None, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    if cn is not None:
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


class _CA:
    def __init__(self, cn: str = "client-ca", *, before: dt.datetime = NOW - DAY, after: dt.datetime = NOW + DAY,
                 usage: list | None = None) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
                   .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(before).not_valid_after(after)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True))
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        self.cert = builder.sign(self.key, hashes.SHA256())

    def issue(self, cn: str | None = "alice", orgs: tuple[str, ...] = ("dev", "ops"), *,
              before: dt.datetime = NOW - DAY, after: dt.datetime = NOW + DAY, usage: list | None = None) -> bytes:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(_name(cn, orgs)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(before).not_valid_after(after))
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        return builder.sign(self.key, hashes.SHA256()).public_bytes(Encoding.DER)


def test_a_certificate_signed_by_the_client_ca_names_user_and_groups():
    ca = _CA()
    user = verify_client_certificate(ca.issue(usage=[ExtendedKeyUsageOID.CLIENT_AUTH]), [ca.cert], NOW)
    assert user == User("alice", groups=("dev", "ops"))


def test_any_certificate_of_the_bundle_is_a_trust_anchor():
    other, ca = _CA("other"), _CA()
    assert verify_client_certificate(ca.issue(), [other.cert, ca.cert], NOW).name == "alice"


def test_a_certificate_from_another_ca_with_the_same_name_is_rejected():
    ca, impostor = _CA("client-ca"), _CA("client-ca")
    with pytest.raises(CertificateRejected, match="signed by unknown authority"):
        verify_client_certificate(impostor.issue(), [ca.cert], NOW)


@pytest.mark.parametrize(
    "leaf, ca_window",
    [
        ({"before": NOW - 2 * DAY, "after": NOW - DAY}, {}),  # expired
        ({"before": NOW + DAY, "after": NOW + 2 * DAY}, {}),  # not yet valid
        ({}, {"before": NOW - 2 * DAY, "after": NOW - DAY}),  # the CA expired
    ],
)
def test_certificates_outside_their_validity_are_rejected(leaf, ca_window):
    ca = _CA(**ca_window)
    with pytest.raises(CertificateRejected, match="has expired or is not yet valid"):
        verify_client_certificate(ca.issue(**leaf), [ca.cert], NOW)


def test_a_server_only_certificate_is_not_for_client_authentication():
    ca = _CA()
    with pytest.raises(CertificateRejected, match="incompatible key usage"):
        verify_client_certificate(ca.issue(usage=[ExtendedKeyUsageOID.SERVER_AUTH]), [ca.cert], NOW)
    assert verify_client_certificate(ca.issue(usage=[ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE]), [ca.cert], NOW)


def test_a_ca_restricted_to_server_auth_cannot_vouch_for_clients():
    ca = _CA(usage=[ExtendedKeyUsageOID.SERVER_AUTH])
    with pytest.raises(CertificateRejected, match="incompatible key usage"):
        verify_client_certificate(ca.issue(), [ca.cert], NOW)


def test_a_valid_certificate_without_a_common_name_names_nobody():
    ca = _CA()
    assert verify_client_certificate(ca.issue(cn=None), [ca.cert], NOW) is None


def test_garbage_is_not_a_certificate():
    with pytest.raises(CertificateRejected, match="not an X.509 certificate"):
        verify_client_certificate(b"\x30\x03junk", [_CA().cert], NOW)


# --- reviews ------------------------------------------------------------------------------------


def test_token_review_carries_only_the_token():
    assert token_review("t0k") == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                   "spec": {"token": "t0k"}}


def test_an_authenticated_token_review_gives_the_user():
    answer = {"status": {"authenticated": True, "user": {
        "username": "system:serviceaccount:default:robot", "uid": "u-1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["web"]}}}}
    assert read_token_review(answer) == (User("system:serviceaccount:default:robot", "u-1",
                                              ("system:serviceaccounts", "system:authenticated"),
                                              {"authentication.kubernetes.io/pod-name": ("web",)}), "")


def test_an_unauthenticated_token_review_gives_no_user_and_its_error():
    assert read_token_review({"status": {"user": {}}}) == (None, "")
    assert read_token_review({"status": {"user": {}, "error": "invalid bearer token"}}) == (None, "invalid bearer token")
    assert read_token_review({}) == (None, "")


def test_subject_access_review_asks_about_the_node_subresource_for_the_user():
    alice = User("alice", "u-9", ("dev", "system:authenticated"), {"scopes": ("a",)})
    attrs = request_attributes("POST", "/exec/ns/p/c", "node1")[0]
    assert subject_access_review(alice, attrs) == {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "create", "group": "", "version": "v1", "resource": "nodes",
                                        "subresource": "proxy", "name": "node1"},
                 "user": "alice", "groups": ["dev", "system:authenticated"], "uid": "u-9",
                 "extra": {"scopes": ["a"]}}}
    bob = subject_access_review(User("bob"), attrs)["spec"]
    assert "uid" not in bob and "extra" not in bob and bob["groups"] == []


def test_reviews_of_different_questions_or_users_have_different_cache_keys():
    attrs = request_attributes("GET", "/pods", "node1")
    keys = {review_cache_key(subject_access_review(u, a)) for u in (User("a"), User("b")) for a in attrs}
    assert len(keys) == 4
    assert review_cache_key(subject_access_review(User("a"), attrs[0])) == review_cache_key(
        subject_access_review(User("a"), attrs[0]))


def test_only_reasonably_sized_questions_are_cached():
    assert cacheable(RequestAttributes("get", "proxy", "node1", "/exec/a/b/c"))
    assert not cacheable(RequestAttributes("get", "proxy", "node1", "/exec/" + "x" * 10000))


@pytest.mark.parametrize(
    "status, outcome",
    [
        ({"allowed": True, "reason": "RBAC: allowed"}, (True, "RBAC: allowed")),
        ({"allowed": False}, (False, "")),
        ({"allowed": False, "denied": True, "reason": "no"}, (False, "no")),
        ({}, (False, "")),
    ],
)
def test_subject_access_review_answers_read_as_decisions(status, outcome):
    assert decision(read_subject_access_review({"status": status})) == outcome


def test_allowed_and_denied_at_once_is_an_error():
    with pytest.raises(ConflictingReview, match="both allow and deny"):
        decision(ReviewStatus(allowed=True, denied=True))


@pytest.mark.parametrize(
    "status, reason, retry_after, reset, retry",
    [
        (500, "InternalError", None, False, True),
        (504, "Timeout", None, False, True),
        (429, "TooManyRequests", None, False, True),
        (503, "ServiceUnavailable", 3.0, False, True),  # it said when
        (503, "ServiceUnavailable", None, False, False),
        (403, "Forbidden", None, False, False),
        (401, "Unauthorized", None, False, False),
        (None, "Unavailable", None, True, True),  # connection reset
        (None, "Unavailable", None, False, False),  # refused, or our own timeout
    ],
)
def test_webhook_errors_are_retried_as_go_default_should_retry_says(status, reason, retry_after, reset, retry):
    assert should_retry(status, reason, retry_after, reset) is retry


def test_webhook_backoff_is_500ms_growing_by_half_with_up_to_20_percent_jitter():
    backoff = webhook_backoff(lambda: 0.0)
    assert [backoff.next_delay() for _ in range(4)] == [0.5, 0.75, 1.125, 1.6875]
    assert webhook_backoff(lambda: 0.999).next_delay() == pytest.approx(0.5 * 1.2, rel=1e-3)


# --- configuration ---------------------------------------------------------------------------


def _config(*, ca: str = "", webhook: bool = True, anonymous: bool = False, mode: str = "Webhook") -> KubeletConfiguration:
    return KubeletConfiguration(
        authentication=KubeletAuthentication(x509=KubeletX509Authentication(client_ca_file=ca),
                                             webhook=KubeletWebhookAuthentication(enabled=webhook),
                                             anonymous=KubeletAnonymousAuthentication(enabled=anonymous)),
        authorization=KubeletAuthorization(mode=mode),
    )


def test_the_defaults_are_valid_in_cluster_mode():
    assert validate_auth(KubeletConfiguration(), has_kubeconfig=True) == []


@pytest.mark.parametrize(
    "config, has_kubeconfig, field, words",
    [
        (_config(mode="RBAC"), True, "authorization.mode", '"RBAC" is not an authorization mode: use Webhook or AlwaysAllow'),
        (_config(mode=""), True, "authorization.mode", '"" is not an authorization mode'),
        (_config(mode="AlwaysAllow"), False, "authentication.webhook.enabled", "set it to false, or give --kubeconfig"),
        (_config(webhook=False, anonymous=True), False, "authorization.mode",
         "set it to AlwaysAllow, or give --kubeconfig"),
        (_config(webhook=False, mode="AlwaysAllow"), True, "authentication",
         "no authentication method configured: set x509.clientCAFile"),
    ],
)
def test_auth_settings_the_go_kubelet_refuses_name_field_and_fix(config, has_kubeconfig, field, words):
    problems = validate_auth(config, has_kubeconfig)
    assert len(problems) == 1 and problems[0][0] == field and words in problems[0][1], problems


@pytest.mark.parametrize(
    "config",
    [
        _config(ca="/etc/ca.crt", webhook=False, mode="AlwaysAllow"),
        _config(webhook=False, anonymous=True, mode="AlwaysAllow"),
    ],
)
def test_standalone_settings_without_webhooks_are_valid(config):
    assert validate_auth(config, has_kubeconfig=False) == []


def test_standalone_mode_falls_back_to_the_go_command_line_defaults_where_nothing_was_given():
    config = standalone_auth(KubeletConfiguration(), explicit=frozenset({"port"}))
    assert (config.authentication.webhook.enabled, config.authentication.anonymous.enabled) == (False, True)
    assert config.authorization.mode == "AlwaysAllow"
    assert validate_auth(config, has_kubeconfig=False) == []


def test_standalone_mode_keeps_what_the_operator_set_so_validation_can_refuse_it():
    given = _config(ca="/ca.crt")  # the file set authentication (webhook left at its default, on)
    config = standalone_auth(given, explicit={"authentication"})
    assert config.authentication == given.authentication
    assert config.authorization.mode == "AlwaysAllow"
    assert [field for field, _ in validate_auth(config, has_kubeconfig=False)] == ["authentication.webhook.enabled"]
    flagged = standalone_auth(_config(mode="Webhook"), explicit={"authorization.mode"})
    assert flagged.authorization.mode == "Webhook"



def test_the_websocket_bearer_token_is_not_passed_on_to_the_runtime():
    from pykubelet.pods.kubelet_auth import without_websocket_bearer_token

    headers = [(b"Upgrade", b"websocket"),
               (b"Sec-WebSocket-Protocol", b"v4.channel.k8s.io, base64url.bearer.authorization.k8s.io.dG9rZW4")]
    assert without_websocket_bearer_token(headers) == [
        (b"Upgrade", b"websocket"), (b"Sec-WebSocket-Protocol", b"v4.channel.k8s.io")]
    only_token = [(b"Sec-WebSocket-Protocol", b"base64url.bearer.authorization.k8s.io.dG9rZW4")]
    assert without_websocket_bearer_token(only_token) == []
