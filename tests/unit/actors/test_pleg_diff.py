"""A relist updates the PLEG's view in place and diffs only what changed: through any
sequence of listings, with runtime events replayed on them, it reports exactly what a full
diff of the view before against a view built afresh reports, and leaves the same view."""

from __future__ import annotations

import random
from collections import Counter

from cri_api.v1 import api_pb2

from pykubelet.actors.pleg_diff import diff, event_to_pleg_events, relist_events
from pykubelet.actors.runtime_pods import RuntimeIndex
from pykubelet.messages.runtime import Relist
from pykubelet.ports.cri.pods import Listing, relisted_container, relisted_sandbox

UIDS = [f"uid-{i}" for i in range(6)]
CONTAINER_STATES = [api_pb2.CONTAINER_CREATED, api_pb2.CONTAINER_RUNNING, api_pb2.CONTAINER_EXITED,
                    api_pb2.CONTAINER_UNKNOWN]
EVENT_KINDS = [api_pb2.CONTAINER_CREATED_EVENT, api_pb2.CONTAINER_STARTED_EVENT, api_pb2.CONTAINER_STOPPED_EVENT,
               api_pb2.CONTAINER_DELETED_EVENT]


def labels(uid: str, name: str = "main") -> dict[str, str]:
    return {"io.pykubelet.managed": "true", "io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": name}


def pod_of(item_id: str) -> str:
    # An id keeps its pod and labels for ever, as in CRI.
    return UIDS[int(item_id.split("-")[1]) % len(UIDS)]


def random_listing(rng: random.Random) -> Listing:
    sandboxes = [
        api_pb2.PodSandbox(
            id=sid, metadata=api_pb2.PodSandboxMetadata(name="p", namespace="ns", uid=pod_of(sid)),
            labels=labels(pod_of(sid)),
            state=rng.choice([api_pb2.SANDBOX_READY, api_pb2.SANDBOX_NOTREADY]),
        )
        for sid in rng.sample([f"s-{i}" for i in range(10)], rng.randrange(11))
    ]
    containers = [
        api_pb2.Container(id=cid, metadata=api_pb2.ContainerMetadata(name="main"), labels=labels(pod_of(cid)),
                          state=rng.choice(CONTAINER_STATES))
        for cid in rng.sample([f"c-{i}" for i in range(14)], rng.randrange(15))
    ]
    rng.shuffle(sandboxes)
    rng.shuffle(containers)
    return Listing(sandboxes, containers)


def random_event(rng: random.Random) -> api_pb2.ContainerEventResponse:
    kind = rng.choice(EVENT_KINDS)
    if rng.random() < 0.3:  # a sandbox's own event
        sid = f"s-{rng.randrange(10)}"
        status = None if kind == api_pb2.CONTAINER_DELETED_EVENT and rng.random() < 0.7 else api_pb2.PodSandboxStatus(
            id=sid, metadata=api_pb2.PodSandboxMetadata(name="p", namespace="ns", uid=pod_of(sid)),
            labels=labels(pod_of(sid)), state=api_pb2.SANDBOX_READY)
        return api_pb2.ContainerEventResponse(container_id=sid, container_event_type=kind, pod_sandbox_status=status)
    cid = f"c-{rng.randrange(14)}"
    # A deleted container is in no status any more, as a rule; a runtime may still send one.
    statuses = [] if kind == api_pb2.CONTAINER_DELETED_EVENT and rng.random() < 0.7 else [
        api_pb2.ContainerStatus(id=cid, metadata=api_pb2.ContainerMetadata(name="main"), labels=labels(pod_of(cid)))
    ]
    return api_pb2.ContainerEventResponse(container_id=cid, container_event_type=kind, containers_statuses=statuses)


def afresh(listing: Listing, during: list[api_pb2.ContainerEventResponse]) -> RuntimeIndex:
    """The view as a relist built it before: converted whole, the events replayed on it."""
    index = RuntimeIndex(Relist(sandboxes=[relisted_sandbox(s) for s in listing.sandboxes],
                                containers=[relisted_container(c) for c in listing.containers]))
    for event in during:
        event_to_pleg_events(index, event)
    return index


def state_of(index: RuntimeIndex):
    return (
        index.sandboxes, index.containers, index.ready_pods(), +index.states,
        {uid for uid in UIDS if index.holds(uid)},
    )


def test_a_relist_in_place_reports_what_a_full_diff_reports_and_leaves_the_same_view():
    rng = random.Random(15)
    view = RuntimeIndex()
    reported = 0
    for step in range(1500):
        if rng.random() < 0.3:  # runtime events between relists change the view too
            event_to_pleg_events(view, random_event(rng))
        listing = random_listing(rng)
        during = [random_event(rng) for _ in range(rng.choice([0, 0, 1, 3]))]
        before = view.relist()
        expected_view = afresh(listing, during)
        expected = diff(before, expected_view.relist())

        events = relist_events(view, listing, during)

        assert state_of(view) == state_of(expected_view), step
        assert Counter(events) == Counter(expected), step
        # Each container's events in the same order (ContainerDied before ContainerRemoved).
        for item_id in {e.container_id for e in expected}:
            assert [e for e in events if e.container_id == item_id] == [
                e for e in expected if e.container_id == item_id], step
        reported += len(events)
    assert reported > 1000  # the walk did change things


def test_a_relist_that_finds_nothing_new_keeps_the_view_and_reports_nothing():
    rng = random.Random(3)
    listing = random_listing(rng)
    view = RuntimeIndex()
    relist_events(view, listing, [])
    first = view.relist()
    items = {**view.sandboxes, **view.containers}

    assert relist_events(view, Listing(list(reversed(listing.sandboxes)), list(reversed(listing.containers))), []) == []
    assert view.relist() is first  # nothing changed: readers keep the same snapshot
    assert all(item is items[item_id] for item_id, item in {**view.sandboxes, **view.containers}.items())


def test_an_event_during_the_relist_wins_over_a_listing_that_predates_it():
    running = api_pb2.Container(id="c-1", metadata=api_pb2.ContainerMetadata(name="main"),
                                labels=labels("uid-1"), state=api_pb2.CONTAINER_RUNNING)
    view = RuntimeIndex()
    relist_events(view, Listing([], [running]), [])
    stopped = api_pb2.ContainerEventResponse(
        container_id="c-1", container_event_type=api_pb2.CONTAINER_STOPPED_EVENT,
        containers_statuses=[api_pb2.ContainerStatus(id="c-1", metadata=api_pb2.ContainerMetadata(name="main"),
                                                     labels=labels("uid-1"))])
    event_to_pleg_events(view, stopped)  # the PLEG told the sync loop at once

    # The relist's list calls ran before the stop; the event came while they ran.
    assert relist_events(view, Listing([], [running]), [stopped]) == []
    assert view.containers["c-1"].state == "exited"
