"""The PLEG's diff between two relists: which events each change produces."""

from __future__ import annotations

import pytest

from pykubelet.actors.pleg import diff
from pykubelet.messages.pod_updates import PlegEvent
from pykubelet.ports.cri.pods import Relist, RelistedContainer, RelistedSandbox


def relist(containers: dict[str, str], sandboxes: dict[str, bool] | None = None) -> Relist:
    return Relist(
        sandboxes=[RelistedSandbox(id=sid, pod_uid="u", name="p", namespace="ns", ready=ready) for sid, ready in (sandboxes or {}).items()],
        containers=[RelistedContainer(id=cid, pod_uid="u", name=cid, state=state) for cid, state in containers.items()],
    )


@pytest.mark.parametrize(
    "before, after, expected",
    [
        (None, {"c1": "running"}, [("ContainerStarted", "c1")]),
        (None, {"c1": "exited"}, [("ContainerDied", "c1")]),
        ({"c1": "running"}, {"c1": "running"}, []),
        ({"c1": "created"}, {"c1": "running"}, [("ContainerStarted", "c1")]),
        ({"c1": "running"}, {"c1": "exited"}, [("ContainerDied", "c1")]),
        ({"c1": "running"}, {}, [("ContainerDied", "c1"), ("ContainerRemoved", "c1")]),
        ({"c1": "exited"}, {}, [("ContainerRemoved", "c1")]),
        ({"c1": "running"}, {"c1": "unknown"}, [("ContainerChanged", "c1")]),
    ],
)
def test_container_changes_become_events(before, after, expected):
    events = diff(relist(before) if before is not None else None, relist(after))
    assert [(e.type, e.container_id) for e in events] == expected
    assert all(isinstance(e, PlegEvent) and e.pod_uid == "u" for e in events)


@pytest.mark.parametrize(
    "before, after, expected",
    [
        ({"s1": True}, {"s1": True}, []),
        ({"s1": True}, {"s1": False}, [("SandboxChanged", "s1")]),
        ({"s1": True}, {}, [("SandboxChanged", "s1")]),
        ({}, {"s1": True}, []),
    ],
)
def test_sandbox_changes_become_events(before, after, expected):
    events = diff(relist({}, before), relist({}, after))
    assert [(e.type, e.container_id) for e in events] == expected
