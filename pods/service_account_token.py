"""Service-account tokens for projected volumes: when the kubelet asks for a new one and
what it asks for (Go: pkg/kubelet/token). Pure; actors/volumes/tokens.py does the requests."""

from __future__ import annotations

from typing import Any

from pykubelet.messages.pod import Pod, ServiceAccountTokenProjection

MAX_TOKEN_AGE = 24 * 3600.0  # a token older than a day is refreshed whatever its lifetime
REFRESH_AT = 0.8  # ... and one past 80 % of its lifetime
DEFAULT_EXPIRATION_SECONDS = 3600  # the API's default for a TokenRequest and a projection


def requires_refresh(issued_at: float, expires_at: float, now: float) -> bool:
    """Go's requiresRefresh: past 80 % of the token's lifetime, or older than 24 h."""
    if now >= issued_at + MAX_TOKEN_AGE:
        return True
    return now >= issued_at + REFRESH_AT * (expires_at - issued_at)


def service_account_name(pod: Pod) -> str:
    return pod.spec.service_account_name or pod.spec.service_account or "default"


def token_request(pod: Pod, projection: ServiceAccountTokenProjection) -> dict[str, Any]:
    """The TokenRequest body: bound to the pod (name and UID), the projection's audience
    (none: the API server's own audiences) and expirationSeconds."""
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [projection.audience] if projection.audience else [],
            "expirationSeconds": projection.expiration_seconds or DEFAULT_EXPIRATION_SECONDS,
            "boundObjectRef": {
                "apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name, "uid": pod.metadata.uid,
            },
        },
    }
