"""The kubelet API's routing: the read-only port serves only reads and never asks for
credentials, debugging handlers answer Go's 405 when disabled, every request on the secure
port goes through authentication first, and /metrics/probes holds only prober series."""

from __future__ import annotations

import msgspec
from prometheus_client import CollectorRegistry, Counter

from pykubelet.actors.health import HealthBoard
from pykubelet.actors.server.http import Request, Response
from pykubelet.actors.server.kubelet_api import KubeletApiSources, kubelet_api, running_pods_from
from pykubelet.messages.pod import pod_list
from pykubelet.messages.runtime import Relist, RelistedContainer, RelistedSandbox


def request(path: str, method: str = "GET") -> Request:
    return Request(method=method, path=path, query={}, headers={})


class RecordingAuth:
    def __init__(self, refusal: Response | None = None) -> None:
        self.seen: list[str] = []
        self.refusal = refusal

    async def check(self, req: Request) -> Response | None:
        self.seen.append(req.path)
        return self.refusal


def sources(**debugging) -> KubeletApiSources:
    registry = CollectorRegistry()
    Counter("prober_probe", "probes", registry=registry).inc()
    Counter("kubelet_other", "other", registry=registry).inc()
    return KubeletApiSources(
        health=HealthBoard(), metrics=registry, pods=lambda: pod_list([]), running_pods=lambda: [],
        configz={"port": 10250}, debugging=debugging,
    )


async def test_every_request_on_the_secure_port_is_authenticated_first():
    auth = RecordingAuth(Response.text(401, "Unauthorized\n"))
    handle = kubelet_api(sources(), auth=auth, enable_debugging_handlers=True)
    assert (await handle(request("/healthz"))).status == 401
    assert auth.seen == ["/healthz"]


async def test_the_read_only_port_serves_reads_without_credentials_and_nothing_else():
    async def exec_handler(req):
        raise AssertionError("never reached")

    handle = kubelet_api(sources(exec=exec_handler), auth=None, enable_debugging_handlers=True, read_only=True)
    assert (await handle(request("/pods"))).status == 200
    assert (await handle(request("/exec/ns/pod/c"))).status == 404
    assert (await handle(request("/configz"))).status == 404


async def test_debugging_handlers_answer_405_when_disabled():
    handle = kubelet_api(sources(), auth=RecordingAuth(), enable_debugging_handlers=False)
    answer = await handle(request("/containerLogs/ns/pod/c"))
    assert (answer.status, answer.body) == (405, b"Debug endpoints are disabled.\n")


async def test_configz_and_the_probe_metrics():
    handle = kubelet_api(sources(), auth=RecordingAuth(), enable_debugging_handlers=True)
    assert msgspec.json.decode((await handle(request("/configz"))).body) == {"kubeletconfig": {"port": 10250}}
    probes = (await handle(request("/metrics/probes"))).body
    assert b"prober_probe_total" in probes and b"kubelet_other" not in probes


def test_running_pods_list_each_pod_with_its_running_containers():
    relist = Relist(
        sandboxes=[RelistedSandbox(id="s", pod_uid="u", name="web", namespace="ns", ready=True)],
        containers=[RelistedContainer(id="c1", pod_uid="u", name="app", state="running"),
                    RelistedContainer(id="c0", pod_uid="u", name="old", state="exited")],
    )
    (pod,) = running_pods_from(relist)
    assert pod["metadata"] == {"name": "web", "namespace": "ns", "uid": "u"}
    assert pod["spec"]["containers"] == [{"name": "app", "resources": {}}]
