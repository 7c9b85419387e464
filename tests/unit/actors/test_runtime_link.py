"""What the runtime link tells the health board about one Status answer, what it keeps
of the runtime's pod network on the RuntimeHandle, and how soon it connects again to a
runtime that was gone."""

from __future__ import annotations

import logging
import random

import pytest
import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors import runtime_link as runtime_link_module
from pykubelet.actors.health import HealthBoard
from pykubelet.actors.runtime_link import (
    RuntimeHandle,
    RuntimeLinkMetrics,
    RuntimeLinkSettings,
    describe,
    runtime_link_actor,
)
from pykubelet.ports.cri import RuntimeCondition, RuntimeStatus, RuntimeUnavailable, RuntimeVersion
from pykubelet.supervisor import ChildSpec
from tests.simulation.runtime import ENDPOINT as SIM_ENDPOINT
from tests.simulation.runtime import SimRuntime
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


def test_the_handle_keeps_the_network_error_of_the_latest_status():
    handle = RuntimeHandle(ENDPOINT)
    assert handle.network_error == "network state unknown"  # Go: ErrNetworkUnknown, until the first Status
    handle.observe_network(RuntimeStatus(conditions=[
        RuntimeCondition("RuntimeReady", True),
        RuntimeCondition("NetworkReady", False, "NetworkPluginNotReady", "cni plugin not initialized")]))  # fmt: skip
    assert handle.network_error == (
        "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
        "message:cni plugin not initialized"
    )
    handle.observe_network(RuntimeStatus(conditions=[RuntimeCondition("NetworkReady", True)]))
    assert handle.network_error is None
    handle.observe_network(RuntimeStatus(conditions=[RuntimeCondition("RuntimeReady", True)]))
    assert handle.network_error == "container runtime network not ready: no NetworkReady condition"


async def test_the_network_is_known_before_the_handle_connects(autojump_clock, monkeypatch, caplog):
    # Pod workers sync as soon as the handle connects: they must not see "network state unknown".
    caplog.set_level(logging.INFO, logger="pykubelet")
    runtime = SimRuntime(rng=random.Random(0), network=RuntimeCondition("NetworkReady", False, "NoCni", "none"))
    monkeypatch.setattr(runtime_link_module, "CriClient", runtime.client_factory())
    handle = RuntimeHandle(SIM_ENDPOINT)
    link = runtime_link_actor(RuntimeLinkSettings(endpoint=SIM_ENDPOINT), health=HealthBoard(),
                              metrics=RuntimeLinkMetrics(CollectorRegistry()), handle=handle)  # fmt: skip
    async with running(ChildSpec("runtime-link", link)):
        await handle.wait_connected()
        assert handle.network_error == (
            "container runtime network not ready: NetworkReady=false reason:NoCni message:none")
        runtime.network = RuntimeCondition("NetworkReady", True)
        await trio.sleep(5 + 0.1)  # the next Status poll (and its call)
        assert handle.network_error is None
    # One line per change: not ready once, ready once.
    lines = [r.getMessage() for r in caplog.records if "network" in r.getMessage()]
    assert lines == [
        "container runtime network not ready: NetworkReady=false reason:NoCni message:none",
        "container runtime network ready",
    ]


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
    monkeypatch.setattr(runtime_link_module, "CriClient", runtime.client)
    handle = RuntimeHandle(ENDPOINT)
    link = runtime_link_actor(
        RuntimeLinkSettings(ENDPOINT), health=HealthBoard(),
        metrics=RuntimeLinkMetrics(CollectorRegistry()), handle=handle,
    )
    async with running(ChildSpec("runtime-link", link)):
        await handle.wait_connected()
        assert trio.current_time() - runtime.up_at <= 3.0
        assert max(b - a for a, b in zip(runtime.dials, runtime.dials[1:])) <= 3.0
