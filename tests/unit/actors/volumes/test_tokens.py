"""The token manager: one TokenRequest per pod and projection, again only when due; a
still-valid token served when its refresh fails; a first failure names the account."""

from __future__ import annotations

import pytest

from pykubelet.actors.volumes.tokens import TokenError, TokenManager
from pykubelet.messages.pod import ObjectMeta, Pod, PodSpec, ServiceAccountTokenProjection
from pykubelet.pods.status import rfc3339
from pykubelet.ports.apiserver.errors import error_from_status

START = 1_735_732_800.0
POD = Pod(metadata=ObjectMeta(name="web", namespace="ns", uid="u-1"), spec=PodSpec(service_account_name="app"))
PROJECTION = ServiceAccountTokenProjection(path="token", expiration_seconds=3600)


class FakeTokenApi:
    def __init__(self, clock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, dict]] = []
        self.fail = False

    async def create(self, path, body):
        self.calls.append((path, body))
        if self.fail:
            raise error_from_status(500, {"kind": "Status", "reason": "InternalError", "message": "boom"},
                                    method="POST", path=path)
        expires = self.clock() + body["spec"]["expirationSeconds"]
        return {"status": {"token": f"token-{len(self.calls)}", "expirationTimestamp": rfc3339(expires)}}


@pytest.fixture
def clock():
    now = [START]
    tick = lambda: now[0]  # noqa: E731
    tick.advance = lambda s: now.__setitem__(0, now[0] + s)
    return tick


async def test_a_token_is_requested_once_and_again_at_80_percent(clock):
    api = FakeTokenApi(clock)
    tokens = TokenManager(api, clock=clock)
    assert await tokens.token(POD, PROJECTION) == b"token-1"
    clock.advance(0.79 * 3600)
    assert await tokens.token(POD, PROJECTION) == b"token-1"
    assert [path for path, _ in api.calls] == ["/api/v1/namespaces/ns/serviceaccounts/app/token"]
    clock.advance(0.02 * 3600)
    assert await tokens.token(POD, PROJECTION) == b"token-2"


async def test_a_failed_refresh_serves_the_still_valid_token(clock):
    api = FakeTokenApi(clock)
    tokens = TokenManager(api, clock=clock)
    await tokens.token(POD, PROJECTION)
    clock.advance(0.9 * 3600)
    api.fail = True
    assert await tokens.token(POD, PROJECTION) == b"token-1"
    clock.advance(0.2 * 3600)  # now expired
    with pytest.raises(TokenError, match="service account ns/app"):
        await tokens.token(POD, PROJECTION)


async def test_a_forgotten_pod_gets_a_new_token(clock):
    api = FakeTokenApi(clock)
    tokens = TokenManager(api, clock=clock)
    await tokens.token(POD, PROJECTION)
    tokens.forget("u-1")
    assert await tokens.token(POD, PROJECTION) == b"token-2"
