"""What the runtime link tells the health board about one Status answer."""

from __future__ import annotations

import pytest

from pykubelet.actors.runtime_link import describe
from pykubelet.ports.cri import RuntimeCondition, RuntimeStatus, RuntimeVersion

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
