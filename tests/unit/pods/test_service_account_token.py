"""When a projected service-account token is requested again, and what is asked for."""

from __future__ import annotations

import pytest

from pykubelet.messages.pod import ObjectMeta, Pod, PodSpec, ServiceAccountTokenProjection
from pykubelet.pods.service_account_token import requires_refresh, service_account_name, token_request

HOUR = 3600.0


@pytest.mark.parametrize(
    "age, lifetime, refresh",
    [
        (0, HOUR, False),
        (0.79 * HOUR, HOUR, False),
        (0.8 * HOUR, HOUR, True),  # 80 % of its lifetime
        (23.9 * HOUR, 48 * HOUR * 10, False),
        (24 * HOUR, 48 * HOUR * 10, True),  # a day old, however long it would live
    ],
)
def test_a_token_is_refreshed_past_80_percent_of_its_lifetime_or_after_a_day(age, lifetime, refresh):
    issued = 1000.0
    assert requires_refresh(issued, issued + lifetime, issued + age) is refresh


def test_the_request_is_bound_to_the_pod_with_the_projections_audience_and_lifetime():
    pod = Pod(metadata=ObjectMeta(name="web", namespace="ns", uid="u-1"), spec=PodSpec(service_account_name="app"))
    body = token_request(pod, ServiceAccountTokenProjection(path="token", audience="vault", expiration_seconds=3607))
    assert body["spec"] == {
        "audiences": ["vault"],
        "expirationSeconds": 3607,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u-1"},
    }
    assert service_account_name(pod) == "app"


def test_no_audience_asks_for_the_api_servers_own_and_an_hour():
    body = token_request(Pod(), ServiceAccountTokenProjection(path="token"))
    assert body["spec"]["audiences"] == [] and body["spec"]["expirationSeconds"] == 3600
    assert service_account_name(Pod()) == "default"
