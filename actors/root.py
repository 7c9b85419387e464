"""The daemon's actor tree: what runs under the root supervisor, in start order.

root (rest_for_one)
├── runtime-link   CRI connection, health check "runtime"
└── server         healthz port and admin socket

rest_for_one: an actor that fails restarts the ones started after it, since later
actors rely on earlier ones (the runtime link comes first).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import trio
import trio_asyncio
from prometheus_client import CollectorRegistry

from pykubelet.actors.health import HealthBoard
from pykubelet.actors.runtime_link import RuntimeLinkMetrics, RuntimeLinkSettings, runtime_link_actor
from pykubelet.actors.server import ServerSettings, server_actor
from pykubelet.actors.server.metrics import ActorTreeCollector
from pykubelet.supervisor import ChildSpec, Supervisor

ADMIN_SOCKET_NAME = "pykubelet.sock"


@dataclass(frozen=True)
class DaemonSettings:
    root_dir: str
    runtime: RuntimeLinkSettings
    healthz_bind_address: str = "127.0.0.1"
    healthz_port: int = 10248
    enable_fault_injection: bool = False

    @property
    def admin_socket(self) -> str:
        return os.path.join(self.root_dir, ADMIN_SOCKET_NAME)


class Daemon:
    """Holds what the actors share (health board, metrics registry) and the root."""

    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings
        self.health = HealthBoard()
        self.metrics = CollectorRegistry()
        runtime_metrics = RuntimeLinkMetrics(self.metrics)
        server = ServerSettings(
            admin_socket=settings.admin_socket,
            healthz_bind_address=settings.healthz_bind_address,
            healthz_port=settings.healthz_port,
            enable_fault_injection=settings.enable_fault_injection,
        )
        self.root = Supervisor(
            "root",
            [
                ChildSpec(
                    "runtime-link",
                    runtime_link_actor(settings.runtime, health=self.health, metrics=runtime_metrics),
                ),
                ChildSpec(
                    "server",
                    server_actor(server, tree=lambda: self.root, health=self.health, metrics=self.metrics),
                ),
            ],
            strategy="rest_for_one",
        )
        self.metrics.register(ActorTreeCollector(self.root.snapshot))

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run the tree until cancelled; raises RestartIntensityExceeded if the root gives up."""
        # grpc.aio (the CRI port) runs on asyncio; trio-asyncio hosts it inside trio.
        async with trio_asyncio.open_loop():
            await self.root.run(task_status=task_status)
