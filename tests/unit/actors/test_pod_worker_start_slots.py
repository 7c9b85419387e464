"""Pod workers start at most `pod_starts` pods at once on the node: a pod holds a slot from
its RunPodSandbox through its containers' StartContainer; the others wait for a slot and
every pod still starts. A pod whose image must be pulled, or whose container has a
postStart hook, gives its slot back first; a pod deleted or evicted while it waits for a
slot, or for its image, is not started, and a TerminatePod a worker took is carried out
even when that worker crashed first. On the simulated runtime (tests/simulation) with slow start calls,
and trio's virtual clock."""

from __future__ import annotations

import random

import msgspec
import pytest
import trio

from pykubelet.actors.pod_workers import pod_worker_actor
from pykubelet.messages.pod import Pod
from pykubelet.messages.pod_updates import EvictedPod, EvictPod, SyncPod, TerminatePod
from pykubelet.ports.cri import CriCallError
from pykubelet.supervisor import ChildSpec, MailboxSpec
from tests.simulation.runtime import ENDPOINT, SimRuntime
from tests.support.actors import running, worker_deps

SANDBOX, CREATE, START, PULL, HOOK = 5.0, 1.0, 5.0, 100.0, 100.0  # seconds each call takes
MISSING = {"example.test/missing:1"}  # images whose pull fails


class SlowStarts:
    """The simulated runtime's client with slow start calls; counts the pods between
    their RunPodSandbox's beginning and their last StartContainer's end."""

    def __init__(self, client) -> None:
        self._client = client
        self.starting: set[str] = set()  # the pods' uids (one container each)
        self.sandboxes_asked: list[str] = []  # every RunPodSandbox's pod uid
        self.most_starting = 0
        self.started: list[str] = []  # uids, in the order their last container started
        self.pulling = 0
        self.pulls_finished = 0
        self.crash_on_stop = False
        self.hooks_running = 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    async def run_pod_sandbox(self, config, *args, **kwargs):
        self.sandboxes_asked.append(config.metadata.uid)
        self.starting.add(config.metadata.uid)
        self.most_starting = max(self.most_starting, len(self.starting))
        await trio.sleep(SANDBOX)
        return await self._client.run_pod_sandbox(config, *args, **kwargs)

    async def create_container(self, sandbox_id, *args, **kwargs):
        await trio.sleep(CREATE)
        return await self._client.create_container(sandbox_id, *args, **kwargs)

    async def start_container(self, container_id):
        await trio.sleep(START)
        await self._client.start_container(container_id)
        uid = self._client._rt.containers[container_id].uid
        self.starting.discard(uid)
        self.started.append(uid)

    async def pull_image(self, image, *args, **kwargs):
        self.pulling += 1
        await trio.sleep(PULL)
        if image in MISSING:
            raise CriCallError(endpoint=ENDPOINT, operation="pull_image", code="NOT_FOUND", detail=f"{image}: not found")
        self.pulls_finished += 1
        return await self._client.pull_image(image, *args, **kwargs)

    async def stop_pod_sandbox(self, sandbox_id):
        if self.crash_on_stop:
            self.crash_on_stop = False
            raise RuntimeError("injected: a bug in the worker's stop path")
        return await self._client.stop_pod_sandbox(sandbox_id)

    async def exec_sync(self, *args, **kwargs):  # the postStart hook
        self.hooks_running += 1
        await trio.sleep(HOOK)
        return await self._client.exec_sync(*args, **kwargs)


async def connected(runtime: SimRuntime) -> SlowStarts:
    client = runtime.client_factory()(ENDPOINT)
    await client.connect()
    return SlowStarts(client)


async def inline_to_thread(fn, *args, **_):
    # A real thread would let the autojump clock jump while it runs (the pod's /etc/hosts
    # and message files are written in one): deadlines would pass that never passed.
    await trio.lowlevel.checkpoint()
    return fn(*args)


@pytest.fixture(autouse=True)
def no_threads(monkeypatch):
    monkeypatch.setattr(trio.to_thread, "run_sync", inline_to_thread)


def host_network_pod(uid: str, image: str = "busybox:1", post_start: bool = False) -> Pod:
    container = {"name": "app", "image": image, "command": ["sleep", "3600"], "imagePullPolicy": "IfNotPresent"}
    if post_start:
        container["lifecycle"] = {"postStart": {"exec": {"command": ["sleep", "100"]}}}  # HOOK
    return msgspec.convert({
        "metadata": {"name": f"web-{uid}", "namespace": "default", "uid": uid},
        "spec": {"hostNetwork": True, "containers": [container]},
    }, Pod)


def workers(pods: list[Pod], deps) -> list[ChildSpec]:
    return [  # transient, as the sync loop makes them: a worker that stopped its pod ends
        ChildSpec(p.metadata.uid, pod_worker_actor(p.metadata.uid, p, deps), restart="transient",
                  mailbox=MailboxSpec(capacity=8, durable=True))
        for p in pods
    ]


async def wait_started(client: SlowStarts, uids: list[str], within: float) -> float:
    with trio.fail_after(within):
        while not set(uids) <= set(client.started):
            await trio.sleep(0.5)
    return trio.current_time()


async def test_at_most_the_bound_of_pods_start_at_once_and_every_pod_starts(autojump_clock, tmp_path):
    runtime = SimRuntime(rng=random.Random(0), images={"busybox:1"})
    client = await connected(runtime)
    deps = worker_deps(client, str(tmp_path), pod_starts=trio.CapacityLimiter(2))
    uids = [f"u{i}" for i in range(5)]
    begun = trio.current_time()
    async with running(*workers([host_network_pod(uid) for uid in uids], deps)):
        done = await wait_started(client, uids, within=300)
    assert client.most_starting == 2  # the bound, reached, never passed: sandbox and containers together
    # Five starts of 11 s each (sandbox 5, create 1, start 5), two at a time: three waves.
    assert done - begun >= 3 * (SANDBOX + CREATE + START)


async def test_without_a_bound_every_pod_starts_at_once(autojump_clock, tmp_path):
    runtime = SimRuntime(rng=random.Random(0), images={"busybox:1"})
    client = await connected(runtime)
    deps = worker_deps(client, str(tmp_path))
    uids = [f"u{i}" for i in range(5)]
    async with running(*workers([host_network_pod(uid) for uid in uids], deps)):
        await wait_started(client, uids, within=300)
    assert client.most_starting == 5


async def wait_for(condition, within: float) -> None:
    with trio.fail_after(within):
        while not condition():
            await trio.sleep(0.5)


async def test_a_pod_pulling_its_image_gives_its_slot_to_the_next_pod(autojump_clock, tmp_path):
    runtime = SimRuntime(rng=random.Random(0), images={"busybox:1"})
    client = await connected(runtime)
    deps = worker_deps(client, str(tmp_path), pod_starts=trio.CapacityLimiter(1))
    async with running(*workers([host_network_pod("pulls", image="example.test/big:1")], deps)):
        await wait_for(lambda: client.pulling == 1, within=60)  # its sandbox made, its pull begun
        pulling_since = trio.current_time()
        async with running(*workers([host_network_pod("present")], deps)):
            started = await wait_started(client, ["present"], within=300)
            assert started - pulling_since < PULL  # did not wait for the other pod's pull
            await wait_started(client, ["pulls"], within=300)  # which starts too, once pulled


async def test_a_post_start_hook_runs_outside_the_slot(autojump_clock, tmp_path):
    runtime = SimRuntime(rng=random.Random(0), images={"busybox:1"})
    client = await connected(runtime)
    deps = worker_deps(client, str(tmp_path), pod_starts=trio.CapacityLimiter(1))
    async with running(*workers([host_network_pod("hooked", post_start=True)], deps)):
        await wait_for(lambda: client.hooks_running == 1, within=60)  # started, its hook running
        hook_since = trio.current_time()
        async with running(*workers([host_network_pod("plain")], deps)):
            started = await wait_started(client, ["plain"], within=300)
            assert started - hook_since < HOOK  # did not wait for the other pod's hook


@pytest.mark.parametrize("asked", ["terminate", "evict"])
async def test_a_pod_deleted_or_evicted_while_waiting_for_a_slot_is_not_started(autojump_clock, tmp_path, asked):
    runtime = SimRuntime(rng=random.Random(0), images={"busybox:1"})
    client = await connected(runtime)
    deps = worker_deps(client, str(tmp_path), pod_starts=trio.CapacityLimiter(1))
    async with running(*workers([host_network_pod("a"), host_network_pod("b")], deps)) as tree:
        await wait_for(lambda: len(client.starting) == 1, within=60)
        (first,) = client.starting
        waits = "b" if first == "a" else "a"  # waits for the slot
        mailbox = tree.registry.lookup(f"root/{waits}")
        if asked == "terminate":
            mailbox.send_nowait(TerminatePod(reason="deleted"))
            await wait_for(lambda: deps.statuses.get(waits) is None, within=60)  # stopped, forgotten
        else:
            mailbox.send_nowait(EvictedPod(eviction=EvictPod(waits, "Evicted", "memory", grace_period_seconds=0)))
            await wait_for(lambda: _phase(deps, waits) == "Failed", within=60)
        await wait_started(client, [first], within=300)
        await trio.sleep(3 * (SANDBOX + CREATE + START))  # the slot is free long enough for another start
    assert client.sandboxes_asked == [first]  # the other pod's sandbox was never asked for
    assert waits not in runtime_pods(runtime)
    assert deps.pod_starts.borrowed_tokens == 0  # no slot kept by the pod given up


async def test_a_newer_spec_read_while_waiting_for_a_slot_is_synced_right_after_the_start(autojump_clock, tmp_path):
    runtime = SimRuntime(rng=random.Random(0), images={"busybox:1"})
    client = await connected(runtime)
    deps = worker_deps(client, str(tmp_path), pod_starts=trio.CapacityLimiter(1))
    assert deps.resync_period >= 30  # far longer than the wait for the newer spec below
    async with running(*workers([host_network_pod("a"), host_network_pod("b")], deps)) as tree:
        await wait_for(lambda: len(client.starting) == 1, within=60)
        (first,) = client.starting
        waits = "b" if first == "a" else "a"
        newer = host_network_pod(waits)
        newer = msgspec.structs.replace(newer, metadata=msgspec.structs.replace(newer.metadata, labels={"v": "2"}))
        tree.registry.lookup(f"root/{waits}").send_nowait(SyncPod(pod=newer))
        await wait_started(client, [waits], within=300)
        # Published with the newer spec by the sync right after the start, not the resync's.
        await wait_for(lambda: deps.statuses.source_pod(waits).metadata.labels == {"v": "2"}, within=5)


async def test_a_pod_deleted_while_its_image_is_pulled_gives_the_pull_up(autojump_clock, tmp_path):
    runtime = SimRuntime(rng=random.Random(0), images={"busybox:1"})
    client = await connected(runtime)
    deps = worker_deps(client, str(tmp_path), pod_starts=trio.CapacityLimiter(1))
    async with running(*workers([host_network_pod("pulls", image="example.test/big:1")], deps)) as tree:
        await wait_for(lambda: client.pulling == 1, within=60)  # its sandbox made, its pull begun
        asked = trio.current_time()
        tree.registry.lookup("root/pulls").send_nowait(TerminatePod(reason="deleted"))
        await wait_for(lambda: deps.statuses.get("pulls") is None, within=PULL)  # stopped, forgotten
        assert trio.current_time() - asked < PULL / 10  # the pull did not run to its end first
        await trio.sleep(2 * PULL)
    assert "pulls" not in client.started and "pulls" not in runtime_pods(runtime)
    assert client.pulls_finished == 0


async def test_a_failed_pull_is_err_image_pull_while_the_worker_reads_its_mailbox(autojump_clock, tmp_path):
    runtime = SimRuntime(rng=random.Random(0), images={"busybox:1"})
    client = await connected(runtime)
    deps = worker_deps(client, str(tmp_path), pod_starts=trio.CapacityLimiter(1))
    async with running(*workers([host_network_pod("missing", image="example.test/missing:1")], deps)):
        def waiting_reason() -> str | None:
            status = deps.statuses.get("missing")
            states = [c.state.waiting for c in status.container_statuses] if status is not None else []
            return states[0].reason if states and states[0] is not None else None

        await wait_for(lambda: waiting_reason() == "ErrImagePull", within=2 * PULL)
    assert client.pulling >= 1


@pytest.mark.parametrize("asked", ["terminate", "evict", "orphan"])
async def test_what_a_crashed_worker_took_from_its_mailbox_the_next_one_carries_out(autojump_clock, tmp_path, asked):
    runtime = SimRuntime(rng=random.Random(0), images={"busybox:1"})
    client = await connected(runtime)
    deps = worker_deps(client, str(tmp_path), pod_starts=trio.CapacityLimiter(1))
    children = workers([host_network_pod("web")], deps)
    if asked == "orphan":  # the pod runs, then a worker with no spec is made to stop it
        async with running(*children):
            await wait_started(client, ["web"], within=60)
        deps.statuses.remove("web")  # as after a daemon restart: known from the runtime alone
        children = [ChildSpec("web", pod_worker_actor("web", None, deps), restart="transient",
                              mailbox=MailboxSpec(capacity=8, durable=True))]
    async with running(*children) as tree:
        await wait_started(client, ["web"], within=60)
        client.crash_on_stop = True  # the first incarnation crashes while it stops the pod
        mailbox = tree.registry.lookup("root/web")
        if asked == "evict":
            mailbox.send_nowait(EvictedPod(eviction=EvictPod("web", "Evicted", "memory", grace_period_seconds=0)))
        else:
            mailbox.send_nowait(TerminatePod(reason="deleted", namespace="default", name="web-web"))
        await wait_for(lambda: not runtime.ready_sandboxes("web") and not runtime.running("web"), within=120)
        assert not client.crash_on_stop  # it did crash
        if asked == "evict":
            assert _phase(deps, "web") == "Failed"
        else:
            await wait_for(lambda: deps.statuses.get("web") is None, within=60)  # stopped, forgotten


def runtime_pods(runtime: SimRuntime) -> set[str]:
    return {sandbox.uid for sandbox in runtime.sandboxes.values()}


def _phase(deps, uid: str) -> str | None:
    status = deps.statuses.get(uid)
    return status.phase if status is not None else None
