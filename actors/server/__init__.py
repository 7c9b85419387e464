"""The server actor: the healthz port and the admin unix socket.

It reads the tree, the health board, the metrics registry, the pods and the events; it owns
nothing else.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable

import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors.health import HealthBoard
from pykubelet.messages.events import Event
from pykubelet.messages.pod import PodList, pod_list
from pykubelet.supervisor import ActorContext, Supervisor

from .http import open_tcp, open_unix, serve_listeners
from .routes import AdminRoutes, healthz_routes, no_events

log = logging.getLogger("pykubelet.server")


class ServerError(OSError):
    """A listener could not be opened; the message names the address and the fix."""


@dataclass(frozen=True)
class ServerSettings:
    admin_socket: str
    healthz_bind_address: str = "127.0.0.1"
    healthz_port: int = 10248  # 0: no healthz port
    enable_fault_injection: bool = False


def server_actor(
    settings: ServerSettings,
    *,
    tree: Callable[[], Supervisor],
    health: HealthBoard,
    metrics: CollectorRegistry,
    pods: Callable[[], PodList] = lambda: pod_list([]),
    events: Callable[..., list[Event]] = no_events,
):
    async def run(ctx: ActorContext) -> None:
        admin = AdminRoutes(
            tree=tree,
            health=health,
            metrics=metrics,
            fault_injection=settings.enable_fault_injection,
            own_path=ctx.path,
            pods=pods,
            events=events,
        )
        try:
            unix = await open_unix(settings.admin_socket)
        except OSError as exc:
            raise ServerError(
                f"admin socket {settings.admin_socket}: {exc}; "
                "check that --root-dir is writable"
            ) from exc
        try:
            tcp = await _open_healthz(settings) if settings.healthz_port else []
        except ServerError:
            await unix.aclose()
            raise
        try:
            log.info(
                "serving",
                extra={
                    "admin_socket": settings.admin_socket,
                    "healthz": f"{settings.healthz_bind_address}:{settings.healthz_port}"
                    if settings.healthz_port
                    else "off",
                },
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_listeners, [unix], admin)
                if tcp:
                    nursery.start_soon(serve_listeners, tcp, healthz_routes(health))
        finally:
            try:
                os.unlink(settings.admin_socket)
            except FileNotFoundError:
                pass

    return run


async def _open_healthz(settings: ServerSettings):
    address = f"{settings.healthz_bind_address}:{settings.healthz_port}"
    try:
        return await open_tcp(settings.healthz_bind_address, settings.healthz_port)
    except OSError as exc:
        raise ServerError(
            f"healthz {address}: {exc.strerror or exc}; another kubelet may hold the port: "
            "stop it or pass --healthz-port (0 turns the healthz port off)"
        ) from exc
