"""Resources made real on the private containerd: each pod in a cgroup of its own under its
QoS class's (kubepods, kubepods/burstable, kubepods/besteffort), the pod's and its
containers' cgroup files holding what the spec asks, a container past its memory limit
OOMKilled and reported so, and a pod's cgroup gone with the pod."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.daemon import cgroup_root_for
from tests.support.pods import container, phase, pod_manifest, pods, wait_for_pod, write_manifest

pytestmark = pytest.mark.containerd

Mi = 2**20
SLEEP = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]


def cgroup_dir(controller: str, path: str) -> Path:
    """The folder of a cgroupfs path in this host's hierarchy for a controller (v1), or in
    the unified tree (v2)."""
    v1 = Path("/sys/fs/cgroup") / controller
    base = v1 if v1.is_dir() else Path("/sys/fs/cgroup")
    return base / path.lstrip("/")


def read(folder: Path, name: str) -> str:
    return (folder / name).read_text().strip()


def v1() -> bool:
    return Path("/sys/fs/cgroup/memory").is_dir()


def resources(cpu: str | None = None, memory: str | None = None, *, limit: bool = True) -> dict:
    amounts = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    return {"requests": amounts, **({"limits": amounts} if limit else {})}


def test_pods_get_cgroups_by_qos_class_with_the_limits_of_their_spec(containerd, manifests, start_daemon):
    daemon = start_daemon(containerd.endpoint)
    kubepods = f"{cgroup_root_for(daemon.root_dir)}/kubepods"
    write_manifest(manifests, pod_manifest("guaranteed", [container("app", SLEEP, resources=resources("200m", "64Mi"))]))
    write_manifest(manifests, pod_manifest("burstable", [container("app", SLEEP, resources=resources("100m", limit=False))]))
    write_manifest(manifests, pod_manifest("besteffort", [container("app", SLEEP)]))
    for name in ("guaranteed", "burstable", "besteffort"):
        wait_for_pod(daemon, name, phase("Running"), "Running")
    seen = pods(daemon)
    assert {name: seen[name]["status"]["qosClass"] for name in seen} == {
        "guaranteed": "Guaranteed", "burstable": "Burstable", "besteffort": "BestEffort"}
    uid = {name: seen[name]["metadata"]["uid"] for name in seen}

    guaranteed = f"{kubepods}/pod{uid['guaranteed']}"
    memory = "memory.limit_in_bytes" if v1() else "memory.max"
    assert int(read(cgroup_dir("memory", guaranteed), memory)) == 64 * Mi
    if v1():
        assert read(cgroup_dir("cpu", guaranteed), "cpu.cfs_quota_us") == "20000"
        assert read(cgroup_dir("cpu", guaranteed), "cpu.shares") == "204"  # 200m of 1024 a core
    else:
        assert read(cgroup_dir("cpu", guaranteed), "cpu.max") == "20000 100000"
    # The container's own cgroup, inside the pod's (the runtime's, from the CRI resources).
    (app,) = [d for d in cgroup_dir("memory", guaranteed).iterdir()
              if d.is_dir() and int(read(d, memory)) == 64 * Mi and (d / "cgroup.procs").read_text().strip()]
    assert app.name in seen["guaranteed"]["status"]["containerStatuses"][0]["containerID"]

    burstable = cgroup_dir("cpu", f"{kubepods}/burstable/pod{uid['burstable']}")
    assert burstable.is_dir() and read(burstable, "cpu.shares" if v1() else "cpu.weight") == ("102" if v1() else "4")
    besteffort = cgroup_dir("cpu", f"{kubepods}/besteffort/pod{uid['besteffort']}")
    assert besteffort.is_dir() and read(besteffort, "cpu.shares" if v1() else "cpu.weight") == ("2" if v1() else "1")
    # The burstable tier's shares follow the pods in it (Go: 100m requested -> 102).
    tier = cgroup_dir("cpu", f"{kubepods}/burstable")
    assert read(tier, "cpu.shares" if v1() else "cpu.weight") == ("102" if v1() else "4")

    # OOM scores by QoS class (Go: Guaranteed -997, BestEffort 1000, Burstable between).
    def oom_score_adj(name: str) -> int:
        cid = seen[name]["status"]["containerStatuses"][0]["containerID"].split("://")[1]
        procs = next(cgroup_dir("memory", f"{kubepods}").rglob(f"{cid}/cgroup.procs")).read_text().split()
        return int(Path(f"/proc/{procs[0]}/oom_score_adj").read_text())

    # -997 where the runtime may lower scores; the test containerd restricts them to its own
    # (0) on machines without CAP_SYS_RESOURCE (tests/support/containerd.py).
    assert oom_score_adj("guaranteed") in (-997, 0)
    assert oom_score_adj("besteffort") == 1000
    assert 2 <= oom_score_adj("burstable") <= 999

    # A pod's cgroup goes with the pod.
    os.unlink(manifests / "burstable.json")
    daemon.wait_for(lambda: "burstable" not in pods(daemon), "the pod to be removed")
    daemon.wait_for(lambda: not burstable.exists(), "its cgroup to be removed")


def test_a_container_past_its_memory_limit_is_oom_killed(containerd, manifests, start_daemon):
    daemon = start_daemon(containerd.endpoint)
    # tail keeps a line with no newline in memory: 100 MB of zeros against a 32Mi limit.
    hog = container("hog", ["sh", "-c", "head -c 100000000 /dev/zero | tail"], resources=resources("100m", "32Mi"))
    write_manifest(manifests, pod_manifest("hog", [hog], restartPolicy="Never"))
    pod = wait_for_pod(daemon, "hog", phase("Failed"), "Failed", timeout=60)
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)
