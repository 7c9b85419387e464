"""What the runtime link tells the health board about one Status answer, and how soon it
connects again to a runtime that was gone."""

from __future__ import annotations

import pytest
import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors import runtime_link
from pykubelet.actors.health import HealthBoard
from pykubelet.actors.runtime_link import RuntimeHandle, describe
from pykubelet.ports.cri import RuntimeCondition, RuntimeStatus, RuntimeUnavailable, RuntimeVersion
from pykubelet.supervisor import ChildSpec
from tests.support.actors import running

VERSION = RuntimeVersion(
    runtime_name="containerd", runtime_version="1.6.20", runtime_api_version="v1", version="0.1.0"
)
ENDPOINT = "unix:///run/containerd/containerd.sock"


@pytest.mark.parametrize(
    "conditions, ready, detail",
    [
        (
            [RuntimeCondition("RuntimeReady", True), RuntimeCondition("NetworkReady", True)],
            True,
            f"containerd 1.6.20 (CRI v1) at {ENDPOINT}: RuntimeReady",
        ),
        (
            [
                RuntimeCondition("RuntimeReady", True),
                RuntimeCondition("NetworkReady", False, "NetworkPluginNotReady", "cni not initialized"),
            ],
            True,  # the network is the node's readiness, not the kubelet's health
            f"containerd 1.6.20 (CRI v1) at {ENDPOINT}: RuntimeReady, NetworkReady=false (NetworkPluginNotReady)",
        ),
        (
            [RuntimeCondition("RuntimeReady", False, "Broken", "shim failed")],
            False,
            f"containerd 1.6.20 (CRI v1) at {ENDPOINT} is not ready: Broken: shim failed",
        ),
        (
            [],
            False,
            f"containerd 1.6.20 (CRI v1) at {ENDPOINT} is not ready: no RuntimeReady condition",
        ),
    ],
)
def test_describe_status(conditions, ready, detail):
    assert describe(ENDPOINT, VERSION, RuntimeStatus(conditions=conditions)) == (ready, detail)


class _Runtime:
    """A runtime that answers nothing before `up_at` (trio time), then everything."""

    def __init__(self, up_at: float) -> None:
        self.up_at = up_at
        self.dials: list[float] = []

    def client(self, endpoint: str, **_: object) -> object:
        runtime = self

        class Client:
            async def connect(self) -> None:
                runtime.dials.append(trio.current_time())
                if trio.current_time() < runtime.up_at:
                    raise RuntimeUnavailable(endpoint=endpoint, operation="connect", detail="connection refused")

            async def version(self) -> RuntimeVersion:
                return VERSION

            async def status(self) -> RuntimeStatus:
                return RuntimeStatus(conditions=[RuntimeCondition("RuntimeReady", True)])

            async def close(self) -> None:
                pass

        return Client()


async def test_a_runtime_back_after_a_long_outage_is_connected_within_3_s(monkeypatch, autojump_clock):
    """Go's CRI client redials at most 3 s apart (cri-client maxBackoffDelay); a 10 s ceiling
    kept every pod waiting up to 10 s after containerd was back (found restarting containerd
    under load, tests/chaos/test_containerd_restart.py)."""
    runtime = _Runtime(up_at=60.0)
    monkeypatch.setattr(runtime_link, "CriClient", runtime.client)
    handle = RuntimeHandle(ENDPOINT)
    link = runtime_link.runtime_link_actor(
        runtime_link.RuntimeLinkSettings(ENDPOINT), health=HealthBoard(),
        metrics=runtime_link.RuntimeLinkMetrics(CollectorRegistry()), handle=handle,
    )
    async with running(ChildSpec("runtime-link", link)):
        await handle.wait_connected()
        assert trio.current_time() - runtime.up_at <= 3.0
        assert max(b - a for a, b in zip(runtime.dials, runtime.dials[1:])) <= 3.0
