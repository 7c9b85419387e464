"""The runtime link: owns the CRI connection to the container runtime.

It handshakes (Version), polls Status every few seconds as the Go kubelet's
updateRuntimeUp does, and reconnects with back-off when the runtime goes away. It
reports what it sees to the health board ("runtime" check) and to metrics. An
unreachable runtime is an expected condition here, not a crash.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio
from prometheus_client import CollectorRegistry, Gauge

from pykubelet.actors.health import HealthBoard
from pykubelet.ports.cri import CriClient, CriError, RuntimeOperationMetrics, RuntimeStatus, RuntimeVersion
from pykubelet.supervisor import ActorContext

log = logging.getLogger("pykubelet.runtime")

CHECK = "runtime"


@dataclass(frozen=True)
class RuntimeLinkSettings:
    endpoint: str
    request_timeout: float = 120.0  # --runtime-request-timeout, Go default 2m
    status_period: float = 5.0  # the Go kubelet checks runtime status every 5s
    reconnect_initial: float = 0.5
    reconnect_max: float = 10.0


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


def runtime_link_actor(settings: RuntimeLinkSettings, *, health: HealthBoard, metrics: RuntimeLinkMetrics):
    async def run(ctx: ActorContext) -> None:
        health.register(CHECK, f"not yet connected to {settings.endpoint}")
        link = _Link(settings, health, metrics)
        delay = settings.reconnect_initial
        while True:
            connected = await link.session(ctx)
            delay = settings.reconnect_initial if connected else min(delay * 2, settings.reconnect_max)
            await trio.sleep(delay)

    return run


class _Link:
    def __init__(self, settings: RuntimeLinkSettings, health: HealthBoard, metrics: RuntimeLinkMetrics):
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
            while True:
                ready, detail = describe(endpoint, version, await client.status())
                self._report(ready, detail)
                await trio.sleep(self.settings.status_period)
        except CriError as exc:
            self._report(False, str(exc))
            return version is not None
        finally:
            with ctx.shutdown_scope():
                await client.close()

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
