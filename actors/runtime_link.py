"""The runtime link: owns the CRI connection to the container runtime.

It handshakes (Version), polls Status every few seconds as the Go kubelet's
updateRuntimeUp does, and reconnects with back-off when the runtime goes away. It
reports what it sees to the health board ("runtime" check), to metrics and, for the
runtime's pod network, on the RuntimeHandle (pod workers and the node status read it). An
unreachable runtime is an expected condition here, not a crash.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio
from prometheus_client import CollectorRegistry, Gauge

from pykubelet.actors.health import HealthBoard
from pykubelet.pods.backoff import ExponentialBackoff
from pykubelet.pods.network import NETWORK_STATE_UNKNOWN, runtime_network_error
from pykubelet.ports.cri import (
    CriClient,
    CriError,
    RuntimeOperationMetrics,
    RuntimeStatus,
    RuntimeUnavailable,
    RuntimeVersion,
)
from pykubelet.supervisor import ActorContext

log = logging.getLogger("pykubelet.runtime")

CHECK = "runtime"


@dataclass(frozen=True)
class RuntimeLinkSettings:
    endpoint: str
    request_timeout: float = 120.0  # --runtime-request-timeout, Go default 2m
    status_period: float = 5.0  # the Go kubelet checks runtime status every 5s
    reconnect_initial: float = 0.5
    # Go's CRI client redials at most 3 s apart, so a runtime that is back is used within
    # 3 s however long it was gone (a 10 s ceiling left pods down up to 10 s after it was).
    reconnect_max: float = 3.0


class RuntimeLinkMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.operations = RuntimeOperationMetrics(registry)
        self.up = Gauge(
            "pykubelet_runtime_up",
            "1 when the CRI runtime answers and reports RuntimeReady.",
            registry=registry,
        )
        self.info = Gauge(
            "pykubelet_runtime_info",
            "The connected CRI runtime (value 1).",
            ["runtime_name", "runtime_version", "runtime_api_version"],
            registry=registry,
        )


class RuntimeHandle:
    """The live CRI connection, for the actors that call the runtime (PLEG, pod workers).

    The runtime link owns the connection and swaps it here; callers take `client` at the
    moment of a call and treat RuntimeUnavailable like any failed call.
    """

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.version: RuntimeVersion | None = None
        self._client: CriClient | None = None
        self._connected = trio.Event()
        # Go: runtimeState's network error, from the latest Status answer (kept while the
        # runtime does not answer); while it is set only hostNetwork pods are set up.
        self.network_error: str | None = NETWORK_STATE_UNKNOWN

    @property
    def client(self) -> CriClient:
        if self._client is None:
            raise RuntimeUnavailable(
                endpoint=self.endpoint, operation="call", detail="the runtime link is not connected"
            )
        return self._client

    @property
    def runtime_name(self) -> str:
        """For container IDs as the API shows them: "<runtime_name>://<id>"."""
        return self.version.runtime_name if self.version else "unknown"

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self) -> None:
        """Until the runtime link has a connection (at once if it has one now)."""
        await self._connected.wait()

    def attach(self, client: CriClient, version: RuntimeVersion) -> None:
        self._client, self.version = client, version
        self._connected.set()

    def observe_network(self, status: RuntimeStatus) -> None:
        network = status.condition("NetworkReady")
        self.network_error = runtime_network_error(
            network.status if network else None, network.reason if network else "", network.message if network else ""
        )

    def detach(self) -> None:
        self._client = None  # the version stays: it names the last runtime seen
        if self._connected.is_set():
            self._connected = trio.Event()


def describe(endpoint: str, version: RuntimeVersion, status: RuntimeStatus) -> tuple[bool, str]:
    """(ready, detail) for the health board, from one Status answer."""
    name = f"{version.runtime_name} {version.runtime_version} (CRI {version.runtime_api_version}) at {endpoint}"
    runtime = status.condition("RuntimeReady")
    network = status.condition("NetworkReady")
    if runtime is None or not runtime.status:
        why = f"{runtime.reason}: {runtime.message}" if runtime else "no RuntimeReady condition"
        return False, f"{name} is not ready: {why}"
    detail = f"{name}: RuntimeReady"
    if network is not None and not network.status:
        detail += f", NetworkReady=false ({network.reason})"
    return True, detail


def runtime_link_actor(
    settings: RuntimeLinkSettings, *, health: HealthBoard, metrics: RuntimeLinkMetrics, handle: RuntimeHandle
):
    async def run(ctx: ActorContext) -> None:
        health.register(CHECK, f"not yet connected to {settings.endpoint}")
        link = _Link(settings, health, metrics, handle)
        backoff = ExponentialBackoff(settings.reconnect_initial, settings.reconnect_max)
        while True:
            if await link.session(ctx):
                backoff.reset()  # it was connected: the first retry after a loss comes soon
            await trio.sleep(backoff.next_delay())

    return run


class _Link:
    def __init__(
        self, settings: RuntimeLinkSettings, health: HealthBoard, metrics: RuntimeLinkMetrics, handle: RuntimeHandle
    ):
        self.handle = handle
        self.settings = settings
        self.health = health
        self.metrics = metrics
        self._last_problem: str | None = None

    async def session(self, ctx: ActorContext) -> bool:
        """One connection, polled until it fails; whether the handshake succeeded."""
        endpoint = self.settings.endpoint
        client = CriClient(endpoint, request_timeout=self.settings.request_timeout, metrics=self.metrics.operations)
        version: RuntimeVersion | None = None
        try:
            await client.connect()
            version = await client.version()
            log.info(
                "connected to container runtime %s %s (CRI %s)",
                version.runtime_name,
                version.runtime_version,
                version.runtime_api_version,
                extra={"endpoint": endpoint},
            )
            self.metrics.info.clear()
            self.metrics.info.labels(
                version.runtime_name, version.runtime_version, version.runtime_api_version
            ).set(1)
            # The first Status before attaching: pod workers start syncing once the handle
            # is connected, and they read the network's state (Go: the sync loop waits
            # for the first updateRuntimeUp).
            self._observe(version, await client.status())
            self.handle.attach(client, version)
            while True:
                await trio.sleep(self.settings.status_period)
                self._observe(version, await client.status())
        except CriError as exc:
            self._report(False, str(exc))
            return version is not None
        finally:
            self.handle.detach()
            with ctx.shutdown_scope():
                await client.close()

    def _observe(self, version: RuntimeVersion, status: RuntimeStatus) -> None:
        before = self.handle.network_error
        self.handle.observe_network(status)
        after = self.handle.network_error
        if after != before:  # one line per change, as for the runtime itself
            if after is None and before != NETWORK_STATE_UNKNOWN:
                log.info("container runtime network ready", extra={"endpoint": self.settings.endpoint})
            elif after is not None:
                log.warning("%s", after, extra={"endpoint": self.settings.endpoint})
        self._report(*describe(self.settings.endpoint, version, status))

    def _report(self, ready: bool, detail: str) -> None:
        self.health.report(CHECK, ready, detail)
        self.metrics.up.set(1 if ready else 0)
        # One log line per change of state, not one per poll.
        problem = None if ready else detail
        if problem != self._last_problem:
            if problem is None:
                log.info("container runtime ready: %s", detail)
            else:
                log.warning("container runtime unavailable: %s", detail)
            self._last_problem = problem
