"""The node status actor on MockClock against an in-memory API: registration (create, or
reconcile an existing Node), status written only on change or every 5 minutes, Ready
following the health board and the runtime, API errors logged once and retried."""

from __future__ import annotations

import copy
import logging

import pytest
import trio

from tests.support.api_fakes import api_error, apply_strategic_merge
from pykubelet.actors.health import HealthBoard
from pykubelet.actors.node_status import (
    STRATEGIC_MERGE_PATCH,
    NodeStatusSettings,
    RegisteredNode,
    node_status_actor,
    read_node_facts,
)
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.pods.node import NodeFacts
from pykubelet.pods.status import rfc3339
from pykubelet.ports.apiserver.client import PATCH_CONTENT_TYPES
from pykubelet.ports.apiserver.errors import unavailable
from pykubelet.ports.cri import RuntimeCondition, RuntimeStatus, RuntimeVersion
from pykubelet.supervisor import ChildSpec
from tests.support.actors import running

WALL_START = 1_795_000_000.0
NAME = "node-a"
NODE_PATH = f"/api/v1/nodes/{NAME}"
FACTS = NodeFacts(
    cpu_count=4, memory_bytes=8 * 1024**3, ephemeral_storage_bytes=50 * 1024**3,
    os_image="Debian GNU/Linux 12 (bookworm)", kernel_version="6.1.0", machine="x86_64",
    machine_id="m-1", boot_id="b-1",
)  # fmt: skip
RUNTIME_DOWN = "CRI status: no CRI runtime answers at unix:///fake.sock: connection refused"



def wall(t: float) -> str:
    return rfc3339(WALL_START + t)


class FakeNodeApi:
    """Nodes in memory, with the calls made (trio time, verb, path) and injectable failures."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict] = {}
        self.calls: list[tuple[float, str, str]] = []
        self.patches: list[tuple[float, dict]] = []
        self.failure: BaseException | None = None
        self._version = 0

    def _call(self, verb: str, path: str) -> None:
        self.calls.append((trio.current_time(), verb, path))
        if self.failure is not None:
            raise self.failure

    def _stored(self, name: str) -> dict:
        self._version += 1
        self.nodes[name]["metadata"]["resourceVersion"] = str(self._version)
        return copy.deepcopy(self.nodes[name])

    async def get(self, path: str) -> dict:
        self._call("GET", path)
        name = path.rsplit("/", 1)[-1]
        if name not in self.nodes:
            raise api_error(404, "NotFound", f'nodes "{name}" not found', method="GET", path=path)
        return copy.deepcopy(self.nodes[name])

    async def create(self, path: str, body: dict) -> dict:
        self._call("POST", path)
        assert path == "/api/v1/nodes"
        name = body["metadata"]["name"]
        if name in self.nodes:
            raise api_error(409, "AlreadyExists", f'nodes "{name}" already exists', method="POST", path=path)
        self.nodes[name] = copy.deepcopy(body)
        self.nodes[name]["metadata"]["uid"] = f"uid-{name}"
        return self._stored(name)

    async def patch(self, path: str, body: dict, patch_type: str) -> dict:
        self._call("PATCH", path)
        assert patch_type == STRATEGIC_MERGE_PATCH and PATCH_CONTENT_TYPES[patch_type].startswith(
            "application/strategic-merge-patch")  # what the real ApiClient accepts
        assert path.startswith("/api/v1/nodes/")
        name = path.removesuffix("/status").split("/")[-1]
        if name not in self.nodes:
            raise api_error(404, "NotFound", f'nodes "{name}" not found', method="PATCH", path=path)
        self.nodes[name] = apply_strategic_merge(self.nodes[name], body)
        self.patches.append((trio.current_time(), body))
        return self._stored(name)

    def verbs(self) -> list[str]:
        return [verb for _, verb, _ in self.calls]

    def ready(self, name: str = NAME) -> dict:
        return next(c for c in self.nodes[name]["status"]["conditions"] if c["type"] == "Ready")


class FakeCri:
    endpoint = "unix:///fake.sock"


def runtime_status(network: RuntimeCondition) -> RuntimeStatus:
    return RuntimeStatus(conditions=[RuntimeCondition("RuntimeReady", True), network])


class Harness:
    def __init__(self, **settings) -> None:
        self.api = FakeNodeApi()
        self.health = HealthBoard()
        self.health.report("runtime", True, "containerd 1.6.20 (CRI v1) at unix:///fake.sock: RuntimeReady")
        self.health.report("pleg", True, "relisted 0 sandboxes")
        self.cri = FakeCri()
        self.runtime = RuntimeHandle(self.cri.endpoint)
        self.runtime.attach(self.cri, RuntimeVersion("containerd", "1.6.20", "v1", "0.1.0"))
        self.runtime.observe_network(runtime_status(RuntimeCondition("NetworkReady", True)))  # as the runtime link does
        self.registered = RegisteredNode()
        self.settings = NodeStatusSettings(node_ip=("10.0.0.5",), kubelet_version="v1.36.0+pykubelet.0.1.0",
                                           **settings)  # fmt: skip
        self.spec = ChildSpec("node-status", node_status_actor(
            self.settings, client=self.api, health=self.health, runtime=self.runtime, node_name=NAME,
            registered=self.registered, facts=lambda: FACTS, wall_clock=lambda: WALL_START + trio.current_time(),
        ))  # fmt: skip


async def test_registers_the_node_then_writes_status_only_on_change_or_every_5_minutes(autojump_clock):
    h = Harness()
    async with running(h.spec):
        await trio.sleep(1)
        assert h.api.verbs() == ["POST", "GET"]
        assert h.registered.uid == "uid-node-a"
        node = h.api.nodes[NAME]
        assert node["metadata"]["labels"] == {
            "kubernetes.io/hostname": NAME, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        assert node["status"]["capacity"] == {"cpu": "4", "ephemeral-storage": "50Gi", "memory": "8Gi", "pods": "110"}
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == "containerd://1.6.20"
        assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "10.0.0.5"},
                                               {"type": "Hostname", "address": NAME}]  # fmt: skip
        assert h.api.ready()["status"] == "True" and h.api.ready()["lastTransitionTime"] == wall(0)

        await trio.sleep(298)  # t=299: read every 10 s, nothing changed, nothing written
        assert h.api.verbs().count("GET") == 30 and h.api.patches == []

        await trio.sleep(2)  # t=301: the report is due
        assert [t for t, _ in h.api.patches] == [300]
        (_, patch), = h.api.patches
        assert {tuple(sorted(c)) for c in patch["status"]["conditions"]} == {("lastHeartbeatTime", "type")}
        assert h.api.ready()["lastHeartbeatTime"] == wall(300)
        assert h.api.ready()["lastTransitionTime"] == wall(0)

        await trio.sleep(300)
        assert [t for t, _ in h.api.patches] == [300, 600]
        assert h.api.verbs().count("POST") == 1


async def test_ready_turns_false_with_the_runtime_detail_when_the_runtime_check_fails(autojump_clock, caplog):
    h = Harness()
    async with running(h.spec):
        await trio.sleep(25)
        h.health.report("runtime", False, RUNTIME_DOWN)
        await trio.sleep(10)  # the update at t=30 writes at once
        assert [t for t, _ in h.api.patches] == [30]
        ready = h.api.ready()
        assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady")
        assert ready["message"] == f"container runtime is down: {RUNTIME_DOWN}"
        assert ready["lastTransitionTime"] == wall(30)
        assert f"node {NAME} is not ready: container runtime is down" in caplog.text

        await trio.sleep(20)  # still down: nothing new to write
        assert len(h.api.patches) == 1

        h.health.report("runtime", True, "containerd: RuntimeReady")
        await trio.sleep(10)
        assert h.api.ready()["status"] == "True" and h.api.ready()["lastTransitionTime"] == wall(60)
        assert h.api.ready()["message"] == "kubelet is posting ready status"


async def test_pleg_and_network_failures_make_the_node_not_ready_with_go_messages(autojump_clock):
    h = Harness()
    async with running(h.spec):
        await trio.sleep(5)
        h.health.report("pleg", False, "PLEG is not healthy: pleg was last seen active 200s ago; threshold is 180s")
        h.runtime.observe_network(runtime_status(
            RuntimeCondition("NetworkReady", False, "NetworkPluginNotReady", "cni plugin not initialized")))
        await trio.sleep(10)
        assert h.api.ready()["message"] == (
            "[PLEG is not healthy: pleg was last seen active 200s ago; threshold is 180s, "
            "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
            "message:cni plugin not initialized]"
        )


async def test_an_existing_node_is_reconciled_instead_of_created(autojump_clock):
    h = Harness()
    h.api.nodes[NAME] = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NAME, "uid": "old-uid", "labels": {
            "kubernetes.io/hostname": NAME, "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64",
            "team": "a"}},
        "spec": {"podCIDR": "10.244.0.0/24"},
        "status": {
            "capacity": {"cpu": "2", "memory": "1Gi", "pods": "110", "example.com/gpu": "1"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}],
            "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                            "message": "Kubelet stopped posting node status.", "lastTransitionTime": wall(-100),
                            "lastHeartbeatTime": wall(-200)}],
        },
    }  # fmt: skip
    async with running(h.spec):
        await trio.sleep(1)
        # The labels through the Node, the status through nodes/<name>/status.
        assert h.api.verbs() == ["POST", "GET", "PATCH", "PATCH", "GET", "PATCH"]
        assert h.registered.uid == "old-uid"
        node = h.api.nodes[NAME]
        assert node["metadata"]["labels"] == {"kubernetes.io/hostname": NAME, "kubernetes.io/os": "linux",
                                              "kubernetes.io/arch": "amd64", "team": "a"}  # fmt: skip
        assert node["spec"] == {"podCIDR": "10.244.0.0/24"}
        assert node["status"]["capacity"] == {"cpu": "4", "ephemeral-storage": "50Gi", "memory": "8Gi",
                                              "pods": "110", "example.com/gpu": "1"}  # fmt: skip
        assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "10.0.0.5"}
        assert h.api.ready()["status"] == "True" and h.api.ready()["lastTransitionTime"] == wall(0)
        assert h.api.patches[0][1] == {"metadata": {"labels": {"kubernetes.io/arch": "amd64"}}}
        assert set(h.api.patches[1][1]) == {"status"}


async def test_register_node_false_never_creates_and_waits_for_the_node(autojump_clock, caplog):
    h = Harness(register_node=False)
    async with running(h.spec) as tree:
        await trio.sleep(35)
        assert "POST" not in h.api.verbs() and h.api.verbs().count("GET") == 4
        assert caplog.text.count("--register-node=false") == 1
        h.api.nodes[NAME] = {"metadata": {"name": NAME, "uid": "made-by-admin"}, "status": {}}
        await trio.sleep(10)
        assert [t for t, _ in h.api.patches] == [40]
        assert h.api.ready()["status"] == "True"
        assert h.registered.uid == "made-by-admin"
        assert tree.snapshot().children[0].restarts == 0


async def test_api_errors_are_logged_once_and_retried_without_a_crash(autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="pykubelet.node_status")
    h = Harness()
    h.api.failure = unavailable(ConnectionRefusedError(111, "Connection refused"), method="POST",
                                path="/api/v1/nodes", url="https://127.0.0.1:6443/api/v1/nodes")
    async with running(h.spec) as tree:
        await trio.sleep(30)
        posts = [t for t, verb, _ in h.api.calls if verb == "POST"]
        gaps = [b - a for a, b in zip(posts, posts[1:])]
        assert gaps[:4] == pytest.approx([0.1, 0.2, 0.4, 0.8]) and max(gaps) == pytest.approx(7.0)  # 0.1 s doubling
        assert caplog.text.count("unable to register node node-a") == 1

        h.api.failure = None
        await trio.sleep(8)
        assert NAME in h.api.nodes and "answers again" in caplog.text

        # A refusal is logged once, with the port's words on the identity a kubelet needs.
        h.api.failure = api_error(403, "Forbidden", 'nodes "node-a" is forbidden: User "bob" cannot get resource '
                                  '"nodes" in API group "" at the cluster scope', method="GET", path=NODE_PATH)
        await trio.sleep(60)
        assert caplog.text.count("error getting node node-a: GET /api/v1/nodes/node-a: 403 Forbidden") == 1
        assert "CN=system:node:<node name> and O=system:nodes" in caplog.text

        h.api.failure = None
        h.health.report("runtime", False, RUNTIME_DOWN)
        await trio.sleep(10)
        assert h.api.ready()["status"] == "False"
        assert tree.snapshot().children[0].restarts == 0


async def test_a_node_deleted_from_the_api_is_registered_again(autojump_clock):
    h = Harness()
    async with running(h.spec):
        await trio.sleep(1)
        del h.api.nodes[NAME]
        await trio.sleep(20)  # found missing at t=10, registered at the next period
        assert [t for t, verb, _ in h.api.calls if verb == "POST"] == [0, 20] and NAME in h.api.nodes


async def test_a_runtime_that_is_not_connected_leaves_the_network_to_the_runtime_check(autojump_clock):
    h = Harness()
    h.runtime.detach()
    h.health.report("runtime", False, RUNTIME_DOWN)
    async with running(h.spec):
        await trio.sleep(1)
        assert h.api.ready()["message"] == f"container runtime is down: {RUNTIME_DOWN}"


def test_read_node_facts_from_the_host_files(tmp_path):
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal:       24684084 kB\nMemFree:        22081288 kB\n")
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("977a9c5f-b5db\n")
    (tmp_path / "etc/os-release").write_text('NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    (tmp_path / "etc/machine-id").write_text("3d1219c7\n")
    facts = read_node_facts(str(tmp_path / "not" / "yet" / "made"), host=str(tmp_path))
    assert facts.memory_bytes == 24684084 * 1024
    assert facts.os_image == "Debian GNU/Linux 12 (bookworm)"
    assert (facts.machine_id, facts.boot_id, facts.system_uuid) == ("3d1219c7", "977a9c5f-b5db", "")
    assert facts.ephemeral_storage_bytes > 0  # measured at the nearest existing parent
    assert facts.cpu_count >= 1 and facts.kernel_version and facts.machine


def test_read_node_facts_without_os_release_says_linux(tmp_path):
    assert read_node_facts(str(tmp_path), host=str(tmp_path)).os_image == "Linux"

