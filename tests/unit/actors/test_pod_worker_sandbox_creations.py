"""Pod workers create at most `sandbox_creations` sandboxes at once on the node: the others
wait for a slot, and every pod's sandbox is still asked for. A fake CRI client whose
RunPodSandbox takes 5 s; no runtime."""

from __future__ import annotations

import msgspec
import trio

from pykubelet.actors.pod_workers import pod_worker_actor
from pykubelet.messages.pod import Pod
from pykubelet.ports.cri import RuntimeUnavailable
from pykubelet.supervisor import ChildSpec, MailboxSpec
from tests.support.actors import running, worker_deps

ENDPOINT = "unix:///run/fake.sock"


class SlowSandboxes:
    """An empty runtime whose RunPodSandbox takes 5 s; records how many were in flight.
    Everything after the sandbox fails as an unreachable runtime, ending the sync."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most_in_flight = 0
        self.asked: list[str] = []

    async def list_pod_sandbox(self, *args, **kwargs):
        return []

    async def list_containers(self, *args, **kwargs):
        return []

    async def run_pod_sandbox(self, config, *args, **kwargs):
        self.asked.append(config.metadata.uid)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await trio.sleep(5)
        finally:
            self.in_flight -= 1
        return f"sandbox-{config.metadata.uid}"

    def __getattr__(self, name):
        async def gone(*args, **kwargs):
            raise RuntimeUnavailable(endpoint=ENDPOINT, operation=name, detail="connect: refused")
        return gone


def host_network_pod(uid: str) -> Pod:
    return msgspec.convert({
        "metadata": {"name": f"web-{uid}", "namespace": "default", "uid": uid},
        "spec": {"hostNetwork": True, "containers": [{"name": "app", "image": "busybox"}]},
    }, Pod)


async def test_at_most_the_bound_of_sandboxes_are_created_at_once(autojump_clock, tmp_path):
    client = SlowSandboxes()
    deps = worker_deps(client, str(tmp_path), sandbox_creations=trio.CapacityLimiter(2))
    uids = [f"u{i}" for i in range(5)]
    workers = [
        ChildSpec(uid, pod_worker_actor(uid, host_network_pod(uid), deps), mailbox=MailboxSpec(capacity=8, durable=True))
        for uid in uids
    ]
    async with running(*workers):
        with trio.fail_after(60):
            while len(set(client.asked)) < len(uids):
                await trio.sleep(1)
        started = trio.current_time()
        while client.in_flight:
            await trio.sleep(1)
    assert sorted(set(client.asked)) == uids
    assert client.most_in_flight == 2  # the bound, reached, never passed
    # Five 5 s creations two at a time: the last one began in the third wave, at 10 s.
    assert started >= 10
