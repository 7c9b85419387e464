"""TokenRequest, the `token` subresource of a ServiceAccount, as
pkg/registry/core/serviceaccount/storage/token.go answers it: body checks, the account
lookup (404), validation (422), the bound object (Pod, Node or Secret; uid mismatch 409),
the projected-token expiry extension, and a signed JWT with the claims kube-apiserver
puts in one (pkg/serviceaccount/claims.go). KubeApi.create_token drives it."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import time
import uuid
from typing import Any, Callable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from tests.support.apiserver import errors, values

ISSUER = "https://kubernetes.default.svc.cluster.local"  # --service-account-issuer, as kubeadm sets it
API_AUDIENCES = (ISSUER,)  # --api-audiences defaults to the issuer
DEFAULT_EXPIRATION = 3600  # SetDefaults_TokenRequestSpec
MIN_EXPIRATION = 600
MAX_EXPIRATION = 1 << 32
WARN_ONLY_EXPIRATION = 3607  # what ServiceAccount admission's projected token asks for
EXTENDED_EXPIRATION = 365 * 24 * 3600  # --service-account-extend-token-expiration (default true)
GROUP = "authentication.k8s.io"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenIssuer:
    """An ES256 signing key made per server; `kid` is the key's SHA-256, as kube-apiserver's."""

    def __init__(self) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        der = self._key.public_key().public_bytes(serialization.Encoding.DER,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo)
        self.kid = _b64url(hashlib.sha256(der).digest())

    def sign(self, claims: dict[str, Any]) -> str:
        header = {"alg": "ES256", "kid": self.kid}
        signing_input = (_b64url(json.dumps(header, separators=(",", ":")).encode()) + "."
                         + _b64url(json.dumps(claims, separators=(",", ":")).encode()))
        r, s = decode_dss_signature(self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return signing_input + "." + _b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))

    def verify(self, token: str) -> dict[str, Any] | None:
        """The claims of a token this issuer signed (any time: expiry is the caller's to
        check), or None for anything else."""
        try:
            header_b64, claims_b64, signature_b64 = token.split(".")
            header = json.loads(_unb64url(header_b64))
            signature = _unb64url(signature_b64)
            if header.get("alg") != "ES256" or header.get("kid") != self.kid or len(signature) != 64:
                return None
            r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
            self._key.public_key().verify(encode_dss_signature(r, s), f"{header_b64}.{claims_b64}".encode(),
                                          ec.ECDSA(hashes.SHA256()))
            claims = json.loads(_unb64url(claims_b64))
        except (ValueError, InvalidSignature):
            return None
        return claims if isinstance(claims, dict) else None


def default(request: dict[str, Any]) -> dict[str, Any]:
    """The decoded TokenRequest's spec with its v1 defaults."""
    spec = request.setdefault("spec", {})
    spec.setdefault("expirationSeconds", DEFAULT_EXPIRATION)
    return spec


def _invalid(name: str, causes: list[dict[str, str]]) -> errors.ApiError:
    return errors.invalid("TokenRequest", name, GROUP, causes)


def check_body(request: dict[str, Any], namespace: str, name: str) -> None:
    """The request's metadata may only repeat the account's name and namespace."""
    meta = request.get("metadata") or {}
    if meta.get("name") and meta["name"] != name:
        raise _invalid(name, [errors.invalid_value("metadata.name", meta["name"], "must match the service account name if specified")])
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise _invalid(name, [errors.invalid_value("metadata.namespace", meta["namespace"],
                                                   "must match the service account namespace if specified")])


def validate(spec: dict[str, Any]) -> None:
    """ValidateTokenRequest (after the audiences are defaulted)."""
    seconds = spec.get("expirationSeconds")
    causes = []
    if seconds < MIN_EXPIRATION:
        causes.append(errors.invalid_value("spec.expirationSeconds", seconds, "may not specify a duration less than 10 minutes"))
    if seconds > MAX_EXPIRATION:
        causes.append(errors.invalid_value("spec.expirationSeconds", seconds, "may not specify a duration larger than 2^32 seconds"))
    if causes:
        raise _invalid("", causes)


def bound_objects(spec: dict[str, Any], account: str, get: Callable[[str, str], dict[str, Any] | None]
                  ) -> dict[str, dict[str, Any]]:
    """{"pod"|"node"|"secret": object} the token is bound to; `get(resource, name)` reads the
    store (namespaced resources in the request's namespace). Raises as TokenREST.Create does."""
    ref = spec.get("boundObjectRef")
    if not ref:
        return {}
    api_version, kind, name = ref.get("apiVersion", ""), ref.get("kind", ""), ref.get("name", "")
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    bound: dict[str, dict[str, Any]] = {}
    if group == "" and kind == "Pod":
        pod = get("pods", name)
        if pod is None:
            raise errors.not_found("pods", "", name)
        if pod["spec"].get("serviceAccountName") != account:
            raise errors.bad_request(f'cannot bind token for serviceaccount "{account}" to pod running with different '
                                     "serviceaccount name.")
        bound["pod"] = target = pod
        if node_name := pod["spec"].get("nodeName"):  # ServiceAccountTokenPodNodeInfo
            bound["node"] = get("nodes", node_name) or {"metadata": {"name": node_name}}
    elif group == "" and kind in ("Node", "Secret"):
        resource = kind.lower() + "s"
        target = get(resource, name)
        if target is None:
            raise errors.not_found(resource, "", name)
        bound[kind.lower()] = target
    else:
        raise errors.bad_request(f"cannot bind token to object of type {group}/{api_version.rpartition('/')[2]}, Kind={kind}")
    if ref.get("uid") and ref["uid"] != target["metadata"].get("uid"):
        raise errors.conflict(kind, "", name, f"the UID in the bound object reference ({ref['uid']}) does not match "
                              "the UID in record. The object might have been deleted and then recreated")
    return bound


def issue(issuer: TokenIssuer, request: dict[str, Any], account: dict[str, Any],
          bound: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The answered TokenRequest: metadata from the account, the spec as defaulted, and a
    status with the token and the requested expiry (the JWT may outlive it, see below)."""
    spec = request["spec"]
    now = int(time.time())
    seconds = spec["expirationSeconds"]
    namespace, name = account["metadata"]["namespace"], account["metadata"]["name"]
    private: dict[str, Any] = {"namespace": namespace,
                               "serviceaccount": {"name": name, "uid": account["metadata"]["uid"]}}
    for kind in ("pod", "secret", "node"):
        if kind in bound:
            meta = bound[kind]["metadata"]
            private[kind] = {"name": meta["name"], **({"uid": meta["uid"]} if meta.get("uid") else {})}
    lifetime = seconds
    if "pod" in bound and seconds == WARN_ONLY_EXPIRATION and set(spec["audiences"]) <= set(API_AUDIENCES):
        private["warnafter"] = now + seconds  # the safe transition for projected tokens
        lifetime = EXTENDED_EXPIRATION
    claims = {"aud": list(spec["audiences"]), "exp": now + lifetime, "iat": now, "iss": ISSUER,
              "jti": str(uuid.uuid4()), "kubernetes.io": private, "nbf": now,
              "sub": f"system:serviceaccount:{namespace}:{name}"}
    expires = datetime.datetime.fromtimestamp(now + seconds, datetime.timezone.utc)
    return {
        "kind": "TokenRequest", "apiVersion": f"{GROUP}/v1",
        "metadata": {"name": name, "namespace": namespace, "uid": account["metadata"]["uid"],
                     "creationTimestamp": values.format_time(datetime.datetime.fromtimestamp(now, datetime.timezone.utc))},
        "spec": {key: spec[key] for key in ("audiences", "expirationSeconds", "boundObjectRef") if key in spec},
        "status": {"token": issuer.sign(claims), "expirationTimestamp": values.format_time(expires)},
    }
