"""What the PLEG's observations mean: the PlegEvents of a relist (against the view the
sync loop was last told of) and of one runtime container event, and the view brought up to
date with either, in place. Pure functions over actors/runtime_pods.RuntimeIndex; the
actor that calls the runtime and sends the events is actors/pleg.py.
"""

from __future__ import annotations

import msgspec

from pykubelet.actors.runtime_pods import RuntimeIndex, RuntimeItem
from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod_updates import PlegEvent
from pykubelet.messages.runtime import Relist, RelistedContainer, RelistedSandbox
from pykubelet.pods.labels import CONTAINER_NAME_LABEL, POD_UID_LABEL, is_managed
from pykubelet.ports.cri.pods import CONTAINER_STATES, Listing, relisted_container, relisted_sandbox


_CONTAINER_EVENTS = {
    "running": "ContainerStarted",
    "exited": "ContainerDied",
    "created": "ContainerChanged",
    "unknown": "ContainerChanged",
}


def item_events(before: RuntimeItem | None, after: RuntimeItem | None) -> list[PlegEvent]:
    """The events of one sandbox or container going from `before` to `after` (None: not
    there), as Go's generic PLEG reports them."""
    if isinstance(before, RelistedSandbox) or isinstance(after, RelistedSandbox):
        if before is not None and (after is None or after.ready != before.ready):
            return [PlegEvent(pod_uid=before.pod_uid, type="SandboxChanged", container_id=before.id)]
        return []
    if after is not None:
        if before is not None and before.state == after.state:
            return []
        return [PlegEvent(pod_uid=after.pod_uid, type=_CONTAINER_EVENTS[after.state], container_id=after.id)]
    if before is None:
        return []
    died = [PlegEvent(pod_uid=before.pod_uid, type="ContainerDied", container_id=before.id)]
    return [*(died if before.state == "running" else []),
            PlegEvent(pod_uid=before.pod_uid, type="ContainerRemoved", container_id=before.id)]


def diff(previous: Relist | None, current: Relist) -> list[PlegEvent]:
    """The events between two relists: containers (new or changed, then gone), then sandboxes."""
    before = {c.id: c for c in previous.containers} if previous else {}
    after = {c.id: c for c in current.containers}
    events = [e for cid, container in after.items() for e in item_events(before.get(cid), container)]
    events += [e for cid, container in before.items() if cid not in after for e in item_events(container, None)]
    sandboxes_after = {s.id: s for s in current.sandboxes}
    for sid, old_sandbox in ({s.id: s for s in previous.sandboxes} if previous else {}).items():
        events += item_events(old_sandbox, sandboxes_after.get(sid))
    return events


Changed = dict[str, "RuntimeItem | None"]  # item id -> the item before a change (None: it was not there)


def apply_listing(index: RuntimeIndex, listing: Listing) -> Changed:
    """Brings `index` to what the runtime's listing shows, in place; returns what changed.

    An item the index holds in the state listed is left as it is, read no further than its
    id and state: CRI never changes a sandbox's or container's labels or metadata, so id
    and state decide everything a relisted item holds. A relist that finds nothing new then
    costs two attribute reads and a lookup per item, not a conversion and a diff."""
    changed: Changed = {}
    known_containers = index.containers
    for c in listing.containers:
        old = known_containers.get(c.id)
        if old is None or old.state != CONTAINER_STATES.get(c.state, "unknown"):
            _record(index, changed, old, relisted_container(c))
    if len(known_containers) != len(listing.containers):
        listed = {c.id for c in listing.containers}
        for gone in [item for cid, item in known_containers.items() if cid not in listed]:
            _record(index, changed, gone, None)
    known_sandboxes = index.sandboxes
    for s in listing.sandboxes:
        old = known_sandboxes.get(s.id)
        if old is None or old.ready != (s.state == api_pb2.SANDBOX_READY):
            _record(index, changed, old, relisted_sandbox(s))
    if len(known_sandboxes) != len(listing.sandboxes):
        listed = {s.id for s in listing.sandboxes}
        for gone in [item for sid, item in known_sandboxes.items() if sid not in listed]:
            _record(index, changed, gone, None)
    return changed


def _record(index: RuntimeIndex, changed: Changed, before: RuntimeItem | None, after: RuntimeItem | None) -> None:
    """Apply one change to the index, keeping the item as it was before the first change."""
    if before is None and after is None:
        return  # an event deleting what the view never held
    item_id = (after or before).id
    changed.setdefault(item_id, before)
    if after is not None:
        index.put(after)
    else:
        index.drop(item_id)


def relist_events(
    index: RuntimeIndex, listing: Listing, during: list[api_pb2.ContainerEventResponse]
) -> list[PlegEvent]:
    """Updates the view `index` with a relist's `listing` and the runtime events that came
    while its list calls ran (replayed on it: the lists may predate them), in place; returns
    what diff(view before, view after) returns, at a cost that grows with the changes, not
    with the pods."""
    changed = apply_listing(index, listing)
    for event in during:
        change = event_change(index, event)
        if change is not None:
            _record(index, changed, *change)
    return changed_events(index, changed)


def changed_events(index: RuntimeIndex, changed: Changed) -> list[PlegEvent]:
    """The events of the changes, against what the index holds now: containers' first, then
    sandboxes', as diff orders them. A change undone since (an item new and gone again)
    reports nothing."""
    containers: list[PlegEvent] = []
    sandboxes: list[PlegEvent] = []
    for item_id, before in changed.items():
        after = index.sandboxes.get(item_id) or index.containers.get(item_id)
        sandbox = isinstance(before, RelistedSandbox) or isinstance(after, RelistedSandbox)
        (sandboxes if sandbox else containers).extend(item_events(before, after))
    return containers + sandboxes


_EVENT_STATES = {
    api_pb2.CONTAINER_CREATED_EVENT: "created",
    api_pb2.CONTAINER_STARTED_EVENT: "running",
    api_pb2.CONTAINER_STOPPED_EVENT: "exited",
}


Change = tuple[RuntimeItem | None, RuntimeItem | None]  # one sandbox or container: (before, after)


def event_change(index: RuntimeIndex, event: api_pb2.ContainerEventResponse) -> Change | None:
    """What one runtime event changes in the view (None: it is about nothing managed).

    The event's type is the transition (CREATED -> created, STARTED -> running, STOPPED ->
    exited, DELETED -> gone); its statuses say only whether the container is ours and whose
    it is, as they were read after the transition. A sandbox's own events carry its id as
    the container id. A DELETED container or sandbox is in no status any more: it counts
    when the view knows it, which holds managed ones only.
    """
    cid, kind = event.container_id, event.container_event_type
    sandbox = event.pod_sandbox_status if event.HasField("pod_sandbox_status") else None
    if cid in index.sandboxes or (sandbox is not None and sandbox.id == cid):
        before = index.sandboxes.get(cid)
        known = before
        if known is None:
            if sandbox is None or not is_managed(dict(sandbox.labels)):
                return None
            known = RelistedSandbox(
                id=cid, pod_uid=sandbox.labels.get(POD_UID_LABEL, ""), name=sandbox.metadata.name,
                namespace=sandbox.metadata.namespace, ready=False,
            )
        if kind == api_pb2.CONTAINER_DELETED_EVENT:
            return before, None
        ready = kind != api_pb2.CONTAINER_STOPPED_EVENT and (
            sandbox is None or sandbox.id != cid or sandbox.state == api_pb2.SANDBOX_READY
        )
        return before, msgspec.structs.replace(known, ready=ready)
    before = index.containers.get(cid)
    known = before
    if known is None:
        status = next((s for s in event.containers_statuses if s.id == cid), None)
        if status is None or not is_managed(dict(status.labels)):
            return None
        known = RelistedContainer(
            id=cid, pod_uid=status.labels.get(POD_UID_LABEL, ""),
            name=status.labels.get(CONTAINER_NAME_LABEL, status.metadata.name), state="unknown",
        )
    if kind == api_pb2.CONTAINER_DELETED_EVENT:
        return before, None
    return before, msgspec.structs.replace(known, state=_EVENT_STATES.get(kind, "unknown"))


def event_to_pleg_events(index: RuntimeIndex, event: api_pb2.ContainerEventResponse) -> tuple[bool, list[PlegEvent]]:
    """Applies one runtime event to the view: (whether it changed, the PlegEvents), exactly
    what a relist would report for the same change, so events and relists never disagree
    on a transition. It diffs the one sandbox or container changed, not the whole view."""
    change = event_change(index, event)
    if change is None:
        return False, []
    before, after = change
    events = item_events(before, after)
    if after is not None:
        index.put(after)
    elif before is not None:
        index.drop(before.id)
    return True, events
