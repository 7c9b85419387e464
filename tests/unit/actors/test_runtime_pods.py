"""The PLEG's runtime index keeps its per-pod counts, ready pods and container states equal
to what a scan of its sandboxes and containers gives, through any sequence of changes."""

from __future__ import annotations

import random
from collections import Counter

from pykubelet.actors.runtime_pods import RuntimeIndex
from pykubelet.messages.runtime import Relist, RelistedContainer, RelistedSandbox


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
