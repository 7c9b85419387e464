"""The node lease actor on MockClock against an in-memory API: the Lease created with its
owner, renewed every 10 s by PUT, 409 -> re-get -> renewed at once, errors backed off
(0.2 s doubling to 7 s) and renewal back within one period after the API server recovers."""

from __future__ import annotations

import copy
import logging

import pytest
import trio

from tests.support.api_fakes import api_error
from pykubelet.actors.node_lease import NodeLeaseSettings, node_lease_actor
from pykubelet.pods.lease import lease_path, leases_path, micro_time
from pykubelet.ports.apiserver.errors import unavailable
from pykubelet.supervisor import ChildSpec
from tests.support.actors import running

WALL_START = 1_795_000_000.25
NAME = "node-a"
PATH = lease_path(NAME)
OWNER = {"apiVersion": "v1", "kind": "Node", "name": NAME, "uid": "uid-a"}



def wall(t: float) -> str:
    return micro_time(WALL_START + t)


class FakeLeaseApi:
    """Leases in memory with resourceVersion checks, the calls made, injectable failures."""

    def __init__(self) -> None:
        self.leases: dict[str, dict] = {}
        self.calls: list[tuple[float, str, str]] = []
        self.puts: list[tuple[float, dict]] = []  # successful PUTs
        self.failure: BaseException | None = None
        self._version = 0

    def _call(self, verb: str, path: str) -> None:
        self.calls.append((trio.current_time(), verb, path))
        if self.failure is not None:
            raise self.failure

    def _store(self, name: str, lease: dict) -> dict:
        self._version += 1
        lease = copy.deepcopy(lease)
        lease["metadata"]["resourceVersion"] = str(self._version)
        self.leases[name] = lease
        return copy.deepcopy(lease)

    def someone_else_writes(self, **spec) -> None:
        lease = copy.deepcopy(self.leases[NAME])
        lease["spec"].update(spec)
        self._store(NAME, lease)

    async def get(self, path: str) -> dict:
        self._call("GET", path)
        name = path.rsplit("/", 1)[-1]
        if name not in self.leases:
            raise api_error(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found', method="GET",
                            path=path)  # fmt: skip
        return copy.deepcopy(self.leases[name])

    async def create(self, path: str, body: dict) -> dict:
        self._call("POST", path)
        assert path == leases_path()
        name = body["metadata"]["name"]
        if name in self.leases:
            raise api_error(409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists',
                            method="POST", path=path)  # fmt: skip
        return self._store(name, body)

    async def replace(self, path: str, body: dict) -> dict:
        self._call("PUT", path)
        name = path.rsplit("/", 1)[-1]
        if name not in self.leases:
            raise api_error(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found', method="PUT",
                            path=path)  # fmt: skip
        if body["metadata"].get("resourceVersion") != self.leases[name]["metadata"]["resourceVersion"]:
            raise api_error(409, "Conflict", f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": '
                            "the object has been modified; please apply your changes to the latest version and "
                            "try again", method="PUT", path=path)  # fmt: skip
        stored = self._store(name, body)
        self.puts.append((trio.current_time(), stored))
        return stored

    def times(self, verb: str) -> list[float]:
        return [t for t, v, _ in self.calls if v == verb]


class Harness:
    def __init__(self, uid: str | None = "uid-a", **settings) -> None:
        self.api = FakeLeaseApi()
        self.uid = uid
        self.spec = ChildSpec("node-lease", node_lease_actor(
            NodeLeaseSettings(**settings), client=self.api, node_name=NAME, node_uid=lambda: self.uid,
            wall_clock=lambda: WALL_START + trio.current_time(), jitter_source=lambda: 0.0,
        ))  # fmt: skip


async def test_the_lease_is_created_with_its_owner_then_renewed_every_10s(autojump_clock):
    h = Harness()
    async with running(h.spec):
        await trio.sleep(1)
        assert [(t, verb) for t, verb, _ in h.api.calls] == [(0, "GET"), (0, "POST")]
        lease = h.api.leases[NAME]
        assert lease["metadata"]["namespace"] == "kube-node-lease"
        assert lease["metadata"]["ownerReferences"] == [OWNER]
        assert lease["spec"] == {"holderIdentity": NAME, "leaseDurationSeconds": 40, "renewTime": wall(0)}
        assert wall(0) == "2026-11-18T11:06:40.250000Z"

        await trio.sleep(34)
        assert [t for t, _ in h.api.puts] == [10, 20, 30]
        assert h.api.times("GET") == [0]  # renewal needs no GET
        assert [lease["spec"]["renewTime"] for _, lease in h.api.puts] == [wall(10), wall(20), wall(30)]
        assert h.api.puts[-1][1]["metadata"]["ownerReferences"] == [OWNER]


async def test_an_existing_lease_is_renewed_at_once(autojump_clock):
    h = Harness()
    h.api._store(NAME, {"metadata": {"name": NAME, "namespace": "kube-node-lease"},
                        "spec": {"holderIdentity": NAME, "leaseDurationSeconds": 40, "renewTime": "old"}})  # fmt: skip
    async with running(h.spec):
        await trio.sleep(1)
        assert [(t, verb) for t, verb, _ in h.api.calls] == [(0, "GET"), (0, "PUT")]
        assert h.api.leases[NAME]["spec"]["renewTime"] == wall(0)
        assert h.api.leases[NAME]["metadata"]["ownerReferences"] == [OWNER]  # added to the old one


async def test_the_lease_waits_for_the_node_uid_before_it_is_created(autojump_clock, caplog):
    h = Harness(uid=None)
    async with running(h.spec):
        await trio.sleep(25)
        assert h.api.times("POST") == [] and h.api.times("GET") == [0, 10, 20]
        assert caplog.text.count("waiting for node node-a to be registered") == 1
        h.uid = "uid-a"
        await trio.sleep(10)
        assert h.api.times("POST") == [30]
        assert h.api.leases[NAME]["metadata"]["ownerReferences"] == [OWNER]


async def test_a_conflict_reads_the_lease_again_and_renews_it_at_once(autojump_clock):
    h = Harness()
    async with running(h.spec):
        await trio.sleep(15)
        h.api.someone_else_writes(leaseTransitions=3)
        await trio.sleep(10)
        assert [(t, verb) for t, verb, _ in h.api.calls if t == 20] == [(20, "PUT"), (20, "GET"), (20, "PUT")]
        assert [t for t, _ in h.api.puts] == [10, 20]
        renewed = h.api.leases[NAME]
        assert renewed["spec"]["leaseTransitions"] == 3 and renewed["spec"]["renewTime"] == wall(20)
        await trio.sleep(10)
        assert [t for t, _ in h.api.puts] == [10, 20, 30]


async def test_server_errors_back_off_and_renewal_resumes_within_a_period_of_recovery(autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="pykubelet.node_lease")
    h = Harness()
    async with running(h.spec) as tree:
        await trio.sleep(15)
        h.api.failure = api_error(500, "InternalError", "etcdserver: request timed out", method="PUT", path=PATH)
        await trio.sleep(60)  # failing from t=15 to t=75
        assert h.api.times("PUT")[-5:] == [20] * 5  # Go's five immediate tries, then back-off on GET
        gets = h.api.times("GET")[1:]
        gaps = [round(b - a, 6) for a, b in zip(gets, gets[1:])]
        assert gaps[:6] == [0.2, 0.4, 0.8, 1.6, 3.2, 6.4] and set(gaps[6:]) == {7.0}

        h.api.failure = None
        await trio.sleep(10)
        resumed = [t for t, _ in h.api.puts if t > 75]
        assert resumed and resumed[0] - 75 <= 7.0  # within one period (10 s) of recovery
        assert h.api.leases[NAME]["spec"]["renewTime"] == wall(resumed[0])
        await trio.sleep(20)
        after = [t for t, _ in h.api.puts if t > 75]
        assert [round(b - a, 6) for a, b in zip(after, after[1:])] == [10.0, 10.0]

        assert caplog.text.count("failed to renew lease kube-node-lease/node-a") == 1
        assert caplog.text.count("failed to ensure lease kube-node-lease/node-a exists") == 1
        assert "lease kube-node-lease/node-a renewed again" in caplog.text
        assert tree.snapshot().children[0].restarts == 0


async def test_an_unreachable_api_server_at_start_backs_off_until_it_answers(autojump_clock):
    h = Harness()
    h.api.failure = unavailable(ConnectionRefusedError(111, "Connection refused"), method="GET", path=PATH,
                                url=f"https://127.0.0.1:6443{PATH}")
    async with running(h.spec):
        await trio.sleep(30)
        assert h.api.times("POST") == []
        h.api.failure = None
        await trio.sleep(7)
        assert len(h.api.times("POST")) == 1 and NAME in h.api.leases


@pytest.mark.parametrize("duration, interval", [(40, 10.0), (60, 15.0)])
def test_renew_interval_follows_the_lease_duration(duration, interval):
    assert NodeLeaseSettings(duration=duration).renew_interval == interval
