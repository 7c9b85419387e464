"""ListPodSandbox and ListContainers filters, as containerd applies them (pure functions).

An id in a filter matches a full id or an unambiguous prefix of one (containerd resolves it
through its truncindex); a state matches when the filter sets one; every entry of a label
selector must be present with the same value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cri_api.v1 import api_pb2


def resolve_id(wanted: str, ids: Iterable[str]) -> str | None:
    """The one id that is `wanted` or starts with it; None when there is none or several."""
    if not wanted:
        return None
    ids = list(ids)
    if wanted in ids:
        return wanted
    matches = [candidate for candidate in ids if candidate.startswith(wanted)]
    return matches[0] if len(matches) == 1 else None


def labels_match(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def filter_sandboxes(
    sandboxes: list[api_pb2.PodSandbox], flt: api_pb2.PodSandboxFilter | None
) -> list[api_pb2.PodSandbox]:
    if flt is None:
        return sandboxes
    chosen = sandboxes
    if flt.id:
        wanted = resolve_id(flt.id, (s.id for s in sandboxes))
        chosen = [s for s in chosen if s.id == wanted]
    if flt.HasField("state"):
        chosen = [s for s in chosen if s.state == flt.state.state]
    if flt.label_selector:
        chosen = [s for s in chosen if labels_match(flt.label_selector, s.labels)]
    return chosen


def filter_containers(
    containers: list[api_pb2.Container],
    flt: api_pb2.ContainerFilter | None,
    sandbox_ids: Iterable[str] = (),
) -> list[api_pb2.Container]:
    """`sandbox_ids`: every known sandbox id, to resolve a prefix in flt.pod_sandbox_id."""
    if flt is None:
        return containers
    chosen = containers
    if flt.id:
        wanted = resolve_id(flt.id, (c.id for c in containers))
        chosen = [c for c in chosen if c.id == wanted]
    if flt.pod_sandbox_id:
        sandbox = resolve_id(flt.pod_sandbox_id, sandbox_ids) or flt.pod_sandbox_id
        chosen = [c for c in chosen if c.pod_sandbox_id == sandbox]
    if flt.HasField("state"):
        chosen = [c for c in chosen if c.state == flt.state.state]
    if flt.label_selector:
        chosen = [c for c in chosen if labels_match(flt.label_selector, c.labels)]
    return chosen
