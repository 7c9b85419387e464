"""Service-account tokens for the pods' projected volumes, through the TokenRequest API
(serviceaccounts/<name>/token), cached per pod and projection and requested again only
when due (pods/service_account_token.py). Pod workers ask; nothing else talks to it."""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

from pykubelet.messages.pod import Pod, ServiceAccountTokenProjection
from pykubelet.pods.service_account_token import requires_refresh, service_account_name, token_request

log = logging.getLogger("pykubelet.volumes.tokens")


class TokenError(Exception):
    """A token the API server would not give; str() names the service account and why."""


def _parse_time(value: str) -> float:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class TokenManager:
    def __init__(self, client: Any, *, clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._clock = clock
        # (pod uid, service account, audience, expiration) -> (token, issued_at, expires_at)
        self._tokens: dict[tuple[str, str, str, int | None], tuple[bytes, float, float]] = {}
        self.requests = 0

    async def token(self, pod: Pod, projection: ServiceAccountTokenProjection) -> bytes:
        account = service_account_name(pod)
        key = (pod.metadata.uid, account, projection.audience, projection.expiration_seconds)
        now = self._clock()
        cached = self._tokens.get(key)
        if cached is not None and not requires_refresh(cached[1], cached[2], now):
            return cached[0]
        path = f"/api/v1/namespaces/{pod.metadata.namespace}/serviceaccounts/{account}/token"
        try:
            answer = await self._client.create(path, token_request(pod, projection))
        except Exception as exc:
            if cached is not None and now < cached[2]:
                # Go keeps serving a token that is still valid when its refresh fails.
                log.warning("refreshing the token of service account %s/%s failed: %s",
                            pod.metadata.namespace, account, exc)
                return cached[0]
            raise TokenError(f"service account {pod.metadata.namespace}/{account}: {exc}") from exc
        self.requests += 1
        status = answer.get("status") or {}
        token = (status.get("token") or "").encode()
        expires = _parse_time(status["expirationTimestamp"]) if status.get("expirationTimestamp") else now + 3600
        self._tokens[key] = (token, now, expires)
        return token

    def forget(self, pod_uid: str) -> None:
        for key in [k for k in self._tokens if k[0] == pod_uid]:
            del self._tokens[key]
