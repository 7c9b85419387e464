"""Static pod manifests for end-to-end tests, and reading pods back from a daemon's /pods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.containerd import BUSYBOX_IMAGE

# Stops at once on SIGTERM (sleep as PID 1 would ignore it).
TRAPPING_LOOP = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]
# Ignores SIGTERM: only the SIGKILL at the end of the grace period stops it.
IGNORING_TERM = ["sh", "-c", "trap '' TERM; while true; do sleep 0.1; done"]


def container(name: str, command: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": BUSYBOX_IMAGE, "command": command, **extra}


def pod_manifest(name: str, containers: list[dict], *, init: list[dict] | None = None, **spec: Any) -> dict:
    body: dict[str, Any] = {"hostNetwork": True, "containers": containers, **spec}
    if init:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": body}


def write_manifest(directory: Path, manifest: dict) -> Path:
    path = directory / f"{manifest['metadata']['name']}.json"
    # A dot file, as editors write them: the file source skips hidden files (as Go does),
    # so it never sees half a manifest, nor the same pod under a second file name.
    tmp = directory / f".{path.name}.tmp"
    tmp.write_text(json.dumps(manifest))
    tmp.rename(path)  # the source never sees half a file
    return path


def pods(daemon) -> dict[str, dict]:
    """The daemon's /pods, by the manifest's pod name (the node suffix removed)."""
    items = daemon.admin("GET", "/pods").json()["items"]
    return {pod["metadata"]["name"].rsplit("-", 1)[0]: pod for pod in items}


def wait_for_pod(daemon, name: str, predicate, what: str, timeout: float = 60.0) -> dict:
    found: dict = {}

    def check() -> bool:
        pod = pods(daemon).get(name)
        if pod is not None and predicate(pod):
            found.update(pod)
            return True
        return False

    daemon.wait_for(check, f"pod {name}: {what}", timeout=timeout)
    return found


def phase(expected: str):
    return lambda pod: pod.get("status", {}).get("phase") == expected


def container_status(pod: dict, name: str, *, init: bool = False) -> dict:
    key = "initContainerStatuses" if init else "containerStatuses"
    return next(s for s in pod["status"].get(key, []) if s["name"] == name)


def waiting_reason(pod: dict, name: str) -> str:
    try:
        return container_status(pod, name)["state"].get("waiting", {}).get("reason", "")
    except StopIteration:
        return ""
