"""The PLEG's runtime index keeps its per-pod counts, ready pods and container states equal
to what a scan of its sandboxes and containers gives, through any sequence of changes; and
a pod worker's last read stands for the runtime only while a newer view shows it unchanged."""

from __future__ import annotations

import math
import random
from collections import Counter

import msgspec
import pytest

from pykubelet.actors.runtime_pods import RuntimeIndex, RuntimePods
from pykubelet.messages.runtime import (
    ContainerRuntimeStatus,
    PodRuntimeStatus,
    Relist,
    RelistedContainer,
    RelistedSandbox,
    SandboxRuntimeStatus,
)


def scanned(view: Relist) -> tuple[set[str], int, Counter]:
    uids = view.pod_uids()
    ready = len({s.pod_uid for s in view.sandboxes if s.ready})
    return uids, ready, Counter(c.state for c in view.containers)


def test_counts_follow_puts_and_drops_as_a_scan_would_find_them():
    rng = random.Random(500)
    index = RuntimeIndex(Relist(
        sandboxes=[RelistedSandbox(id="s0", pod_uid="p0", name="n", namespace="ns", ready=True)],
        containers=[RelistedContainer(id="c0", pod_uid="p0", name="c", state="running")],
    ))
    for _ in range(3000):
        pod = f"p{rng.randrange(8)}"
        if rng.random() < 0.3:
            index.drop(rng.choice([f"s{i}" for i in range(12)] + [f"c{i}" for i in range(12)]))
        elif rng.random() < 0.5:
            index.put(RelistedSandbox(id=f"s{rng.randrange(12)}", pod_uid=pod, name="n", namespace="ns",
                                      ready=rng.random() < 0.5))
        else:
            index.put(RelistedContainer(id=f"c{rng.randrange(12)}", pod_uid=pod, name="c",
                                        state=rng.choice(["created", "running", "exited", "unknown"])))
        view = index.relist()
        assert view == Relist(sandboxes=list(index.sandboxes.values()), containers=list(index.containers.values()))
        uids, ready, states = scanned(view)
        assert {f"p{i}" for i in range(8) if index.holds(f"p{i}")} == uids
        assert index.ready_pods() == ready
        assert +index.states == states
        rebuilt = RuntimeIndex(view)  # as a relist builds it, all at once
        assert (rebuilt.sandboxes, rebuilt.containers, rebuilt.ready_pods(), +rebuilt.states) == (
            index.sandboxes, index.containers, index.ready_pods(), +index.states)
        assert all(rebuilt.holds(uid) == index.holds(uid) for uid in (f"p{i}" for i in range(8)))


def test_a_view_is_built_once_until_the_next_change():
    index = RuntimeIndex()
    first = index.relist()
    assert index.relist() is first
    index.put(RelistedContainer(id="c1", pod_uid="u", name="c", state="running"))
    second = index.relist()
    assert second is not first and second.containers[0].id == "c1"
    index.drop("nothing-of-that-id")
    assert index.relist() is second


def _read(*, ready: bool = True, state: str = "running", extra: bool = False) -> PodRuntimeStatus:
    """A pod worker's read of pod u: sandbox s1, container c1 (and c2)."""
    containers = [ContainerRuntimeStatus(id="c1", name="app", state=state, created_at=2.0, exit_code=None)]
    if extra:
        containers.append(ContainerRuntimeStatus(id="c2", name="app", state="exited", created_at=1.0, exit_code=1))
    return PodRuntimeStatus(uid="u", name="web", namespace="default", containers=containers, sandboxes=[
        SandboxRuntimeStatus(id="s1", state="ready" if ready else "notready", created_at=1.0, ip="10.0.0.5")])


def _relisted(began: float) -> RuntimePods:
    pods = RuntimePods()
    pods.relisted(Relist(
        sandboxes=[RelistedSandbox(id="s1", pod_uid="u", name="web", namespace="default", ready=True),
                   RelistedSandbox(id="s9", pod_uid="other", name="db", namespace="default", ready=True)],
        containers=[RelistedContainer(id="c1", pod_uid="u", name="app", state="running"),
                    RelistedContainer(id="c9", pod_uid="other", name="db", state="running")],
    ), began)
    return pods


@pytest.mark.parametrize("read, synced_at, expected", [
    (_read(), 9.0, True),  # the relist began after the last sync and shows the pod as read
    (_read(), 10.0, False),  # began as the last sync ended: not newer
    (_read(), 11.0, False),  # older than the last sync
    (_read(state="exited"), 9.0, False),  # a container's state differs
    (_read(state="created"), 9.0, False),
    (_read(ready=False), 9.0, False),  # the sandbox's readiness differs
    (_read(extra=True), 9.0, False),  # a container the relist does not show (removed)
    (msgspec.structs.replace(_read(), containers=[]), 9.0, False),  # one the read did not see
])
def test_a_read_stands_only_for_a_newer_relist_showing_the_pod_unchanged(read, synced_at, expected):
    assert _relisted(began=10.0).unchanged_since(read, synced_at) is expected


def test_a_runtime_event_applied_to_the_view_since_the_relist_counts():
    pods = _relisted(began=10.0)
    assert pods.unchanged_since(_read(), 9.0)
    pods.index.put(RelistedContainer(id="c1", pod_uid="u", name="app", state="exited"))  # as the PLEG's event follower does
    assert not pods.unchanged_since(_read(), 9.0)
    assert pods.unchanged_since(_read(state="exited"), 9.0)


def test_no_relist_yet_or_a_view_without_its_time_stands_for_nothing():
    pods = RuntimePods()
    assert not pods.unchanged_since(_read(), -math.inf)
    pods.latest = _relisted(began=10.0).latest  # a view set without a relist's time (as a test would)
    assert not pods.unchanged_since(_read(), -math.inf)
