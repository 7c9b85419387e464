"""The runtime's pod network: the error a NetworkReady condition makes, as Go words it, and
which syncs it holds (every pod but hostNetwork ones, unless the pod is being stopped)."""

from __future__ import annotations

import msgspec
import pytest

from pykubelet.messages.pod import Pod
from pykubelet.pods.actions import PodActions
from pykubelet.pods.network import NETWORK_STATE_UNKNOWN, network_not_ready, runtime_network_error

CNI_ERROR = ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
             "message:Network plugin returns error: cni plugin not initialized")  # fmt: skip


def pod(host_network: bool) -> Pod:
    return msgspec.convert({"metadata": {"name": "web", "namespace": "default", "uid": "uid-web"},
                            "spec": {"hostNetwork": host_network, "containers": [{"name": "c", "image": "busybox"}]}},
                           Pod)  # fmt: skip


@pytest.mark.parametrize(
    "ready, reason, message, expected",
    [
        (True, "", "", None),
        (False, "NetworkPluginNotReady", "Network plugin returns error: cni plugin not initialized", CNI_ERROR),
        (None, "", "", "container runtime network not ready: no NetworkReady condition"),
    ],
)
def test_runtime_network_error_reads_as_go_prints_the_condition(ready, reason, message, expected):
    assert runtime_network_error(ready, reason, message) == expected


NEW_POD = PodActions(kill_pod=True, create_sandbox=True, containers_to_start=(0,))
RUNNING = PodActions(sandbox_id="s1")
RESTART = PodActions(sandbox_id="s1", containers_to_start=(0,))
SANDBOX_CHANGED = PodActions(kill_pod=True, create_sandbox=True, sandbox_id="s1", attempt=1, containers_to_start=(0,))
STOP = PodActions(kill_pod=True, sandbox_id="s1")  # past its deadline, evicted, its work done


@pytest.mark.parametrize(
    "host_network, actions, error, terminal, expected",
    [
        # the network is ready: every pod goes on
        (False, NEW_POD, None, False, None),
        # not ready: a pod on the pod network waits, with Go's message
        (False, NEW_POD, CNI_ERROR, False, f"network is not ready: {CNI_ERROR}"),
        (False, NEW_POD, NETWORK_STATE_UNKNOWN, False, "network is not ready: network state unknown"),
        # ... a running one too: no restart, no new sandbox (Go returns before the runtime's SyncPod)
        (False, RUNNING, CNI_ERROR, False, f"network is not ready: {CNI_ERROR}"),
        (False, RESTART, CNI_ERROR, False, f"network is not ready: {CNI_ERROR}"),
        (False, SANDBOX_CHANGED, CNI_ERROR, False, f"network is not ready: {CNI_ERROR}"),
        # a hostNetwork pod needs no pod network
        (True, NEW_POD, CNI_ERROR, False, None),
        (True, NEW_POD, NETWORK_STATE_UNKNOWN, False, None),
        # a pod being stopped for good is stopped whatever the network does
        (False, STOP, CNI_ERROR, False, None),
        (False, RUNNING, CNI_ERROR, True, None),
    ],
)
def test_only_pod_network_pods_being_set_up_wait_for_the_network(host_network, actions, error, terminal, expected):
    assert network_not_ready(pod(host_network), actions, error, terminal=terminal) == expected
