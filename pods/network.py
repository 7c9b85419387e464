"""The runtime's pod network, pure: the error its NetworkReady condition makes (Go:
updateRuntimeUp and runtimeState.networkErrors), and whether a pod sync may go on while
there is one (Go: SyncPod holds every pod but hostNetwork ones). The runtime link keeps the
error, the pod workers and the node status actor read it."""

from __future__ import annotations

from pykubelet.messages.pod import Pod
from pykubelet.pods.actions import PodActions

NETWORK_NOT_READY_ERROR = "network is not ready"  # Go: NetworkNotReadyErrorMsg
NETWORK_STATE_UNKNOWN = "network state unknown"  # Go: ErrNetworkUnknown, before the first Status
RUNTIME_NETWORK_NOT_READY = "container runtime network not ready"


def runtime_network_error(ready: bool | None, reason: str = "", message: str = "") -> str | None:
    """The network error of one Status answer: None when NetworkReady is true, else Go's
    "container runtime network not ready: NetworkReady=false reason:... message:...".
    `ready` None: the runtime reports no NetworkReady condition at all."""
    if ready:
        return None
    if ready is None:
        return f"{RUNTIME_NETWORK_NOT_READY}: no NetworkReady condition"
    return f"{RUNTIME_NETWORK_NOT_READY}: NetworkReady=false reason:{reason} message:{message}"


def network_not_ready(pod: Pod, actions: PodActions, network_error: str | None, *, terminal: bool) -> str | None:
    """Why this sync must stop before it sets the pod up, in Go's words ("network is not
    ready: <error>"), or None to go on. A hostNetwork pod needs no pod network. A pod being
    stopped for good (`terminal`, or killed with nothing to start again: past its deadline,
    evicted, its init failed) is stopped whatever the network does; any other pod is held
    whole, its kills and restarts too, as Go returns before the runtime's SyncPod."""
    if network_error is None or pod.spec.host_network or terminal:
        return None
    if actions.kill_pod and not actions.create_sandbox:
        return None
    return f"{NETWORK_NOT_READY_ERROR}: {network_error}"
