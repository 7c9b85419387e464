"""The server actor: the healthz port, the admin unix socket and the kubelet API (HTTPS on
--address:--port, and plain HTTP on --read-only-port when set).

It reads the tree, the health board, the metrics registry, the pods and the events; it owns
nothing else.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import Callable

import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors.health import HealthBoard
from pykubelet.messages.config import KubeletConfiguration
from pykubelet.messages.events import Event
from pykubelet.messages.pod import PodList, pod_list
from pykubelet.supervisor import ActorContext, Supervisor

from pykubelet.ports.serving_cert import ServingCertError, TlsSettings, server_context, serving_cert_files

from .http import Handler, open_tcp, open_unix, serve_connection, serve_listeners
from .kubelet_api import Auth, KubeletApiSources, kubelet_api
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
    kubelet_api: KubeletApiSettings | None = None  # None: enableServer false


@dataclass(frozen=True)
class KubeletApiSettings:
    node_name: str
    node_ips: tuple[str, ...]
    address: str = "0.0.0.0"  # address
    port: int = 10250  # port
    read_only_port: int = 0  # readOnlyPort (0: off)
    enable_debugging_handlers: bool = True  # enableDebuggingHandlers
    tls: TlsSettings = TlsSettings()
    # The effective configuration: what authentication and authorization read, and what
    # /configz shows.
    config: KubeletConfiguration | None = None


def server_actor(
    settings: ServerSettings,
    *,
    tree: Callable[[], Supervisor],
    health: HealthBoard,
    metrics: CollectorRegistry,
    pods: Callable[[], PodList] = lambda: pod_list([]),
    events: Callable[..., list[Event]] = no_events,
    api_sources: KubeletApiSources | None = None,
    auth: Callable[[], Auth] | None = None,
):
    """`api_sources` and `auth` (made per incarnation) serve the kubelet API when
    settings.kubelet_api is set. The admin socket serves /containerLogs and /run from
    api_sources.debugging whether or not the kubelet API is on."""

    async def run(ctx: ActorContext) -> None:
        admin = AdminRoutes(
            tree=tree,
            health=health,
            metrics=metrics,
            fault_injection=settings.enable_fault_injection,
            own_path=ctx.path,
            pods=pods,
            events=events,
            debugging=api_sources.debugging if api_sources is not None else {},
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
                if settings.kubelet_api is not None and api_sources is not None and auth is not None:
                    await _serve_kubelet_api(nursery, settings.kubelet_api, api_sources, auth())
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


async def _serve_kubelet_api(nursery: trio.Nursery, settings: KubeletApiSettings, sources: KubeletApiSources,
                             auth: Auth) -> None:
    """HTTPS on address:port, authenticated; HTTP on readOnlyPort, read-only, if set."""
    try:
        # In a thread: making the self-signed pair waits for a child process (ports/serving_cert.py).
        cert, key = await trio.to_thread.run_sync(functools.partial(
            serving_cert_files, settings.tls, node_name=settings.node_name, node_ips=settings.node_ips))
        context = server_context(settings.tls, cert, key)
    except (ServingCertError, OSError) as exc:
        raise ServerError(f"kubelet API {settings.address}:{settings.port}: {exc}") from exc
    secure = await _open(settings.address, settings.port, "port")
    handler = kubelet_api(sources, auth=auth, enable_debugging_handlers=settings.enable_debugging_handlers)
    nursery.start_soon(_serve_tls, secure, context, handler)
    if sources.stats is not None:
        nursery.start_soon(sources.stats.run)  # keeps the runtime's stats sample fresh
    log.info("kubelet API serving", extra={"address": f"https://{settings.address}:{settings.port}", "certificate": cert})
    if settings.read_only_port:
        plain = await _open(settings.address, settings.read_only_port, "read-only-port")
        read_only = kubelet_api(sources, auth=None, enable_debugging_handlers=False, read_only=True)
        nursery.start_soon(serve_listeners, plain, read_only)
        log.warning("kubelet read-only API serving without authentication",
                    extra={"address": f"http://{settings.address}:{settings.read_only_port}"})


async def _open(address: str, port: int, flag: str):
    try:
        return await open_tcp(address, port)
    except OSError as exc:
        raise ServerError(
            f"kubelet API {address}:{port}: {exc.strerror or exc}; another kubelet may hold the port: "
            f"stop it or pass --{flag}"
        ) from exc


async def _serve_tls(listeners, context, handler: Handler) -> None:
    """TLS by hand over the TCP listeners, so that each connection's client certificate
    reaches authentication."""

    async def on_connection(tcp: trio.abc.Stream) -> None:
        stream = trio.SSLStream(tcp, context, server_side=True, https_compatible=True)
        try:
            with trio.fail_after(10):
                await stream.do_handshake()
        except (trio.BrokenResourceError, trio.TooSlowError):
            await trio.aclose_forcefully(tcp)
            return
        await serve_connection(stream, handler, peer_certificate=stream.getpeercert(binary_form=True))

    await trio.serve_listeners(on_connection, listeners)
