"""Chaos on real parts, cluster mode: the test API server is restarted (SIGKILL, or a clean
exit, keeping its stored objects as kube-apiserver keeps them in etcd) and faulted (500s,
hangs) while API pods and static pods run and churn (pods created and deleted through the
API, a static pod added during the outage). After each episode, checked from outside:
no container restarted, every wanted pod Running with the API's status equal to what the
kubelet reports at its admin socket (/pods), deleted pods gone, the Node Ready and its
Lease renewed again, and exactly one mirror pod per static pod, the same one as before for
a static pod nobody touched. The static pod added during an outage must have its mirror pod,
Running in the API as the kubelet says, within MIRROR_BOUND seconds (the issue's 5 s) of the
API server answering again, or of the kubelet running it if containerd took longer to start
it; both delays are printed.

CI runs two episodes (a SIGKILL restart, then 500s); CHAOS_APISERVER_EPISODES=<n>
CHAOS_PODS=<n> CHAOS_SEED=<n> CHAOS_DOWN=<seconds> run the long one, which cycles through
SIGKILL restarts, 500s, clean restarts and hangs (docs/reliability.md)."""

from __future__ import annotations

import math
import os
import random
import statistics
import time

import pytest

from tests.support.containerd import BUSYBOX_IMAGE
from tests.support.daemon import DaemonProcess
from tests.support.pods import TRAPPING_LOOP, container, pod_manifest, write_manifest

EPISODES = int(os.environ.get("CHAOS_APISERVER_EPISODES", "2"))
PODS = int(os.environ.get("CHAOS_PODS", "4"))  # API pods; half as many static pods
SEED = int(os.environ.get("CHAOS_SEED", "14"))
DOWN = float(os.environ.get("CHAOS_DOWN", "3"))  # most seconds of an outage or a fault
KINDS = ["kill", "fail", "terminate", "hang"]
CONVERGE = 60.0  # seconds the node may take to be whole again (a bound, not a target)
# Seconds from the API server answering again (its restart returned: it has written its
# ready file) until the static pod added during the outage is Running in the API, in its
# mirror pod, as the kubelet says (issue 14's bound). Counted from the later of that and
# the kubelet's /pods first saying Running: on a loaded machine containerd alone can take
# seconds to start the container, which is not the kubelet's API path. CHAOS_MIRROR_BOUND
# widens it on a machine too loaded to answer a few requests in time.
MIRROR_BOUND = float(os.environ.get("CHAOS_MIRROR_BOUND", "5"))
PODS_PATH = "/api/v1/namespaces/default/pods"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node1"
MIRROR = "kubernetes.io/config.mirror"

pytestmark = [pytest.mark.containerd, pytest.mark.chaos]


def start_daemon(tmp_path, apiserver, containerd, manifests) -> DaemonProcess:
    config = tmp_path / "kubelet.yaml"
    config.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "nodeStatusUpdateFrequency: 1s\nnodeStatusReportFrequency: 5m\n"
        "nodeLeaseDurationSeconds: 8\n"  # renewed every 2s
        f"podLogsDir: {tmp_path / 'pod-logs'}\n"
    )
    return DaemonProcess(
        tmp_path / "root", f"--config={config}", f"--kubeconfig={apiserver.kubeconfig('system:node:node1')}",
        f"--container-runtime-endpoint={containerd.endpoint}", "--hostname-override=node1",
        "--node-ip=127.0.0.1", f"--pod-manifest-path={manifests}",
    ).start()


def api_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "node1", "hostNetwork": True, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": BUSYBOX_IMAGE, "command": TRAPPING_LOOP}]}}


def view(pod: dict) -> tuple:
    """What must agree between the API and the kubelet: phase, and per container its ID,
    restart count, readiness and state."""
    status = pod.get("status", {})
    return status.get("phase"), tuple(
        (c.get("name"), c.get("containerID"), c.get("restartCount"), c.get("ready"), tuple(c.get("state", {})))
        for c in status.get("containerStatuses") or [])


class Node:
    """The node seen from outside: the API's objects and the kubelet's admin socket."""

    def __init__(self, apiserver, daemon) -> None:
        self.apiserver, self.daemon = apiserver, daemon

    def api_pods(self) -> dict[str, dict]:
        return {p["metadata"]["name"]: p for p in self.apiserver.admin.get(PODS_PATH).json()["items"]}

    def kubelet_pods(self) -> dict[str, dict]:
        return {p["metadata"]["name"]: p for p in self.daemon.admin("GET", "/pods").json()["items"]}

    def ready(self) -> bool:
        node = self.apiserver.admin.get("/api/v1/nodes/node1").json()
        if node.get("kind") != "Node":  # a 404 Status: the kubelet has not registered it yet
            return False
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))

    def renewed(self) -> str | None:
        """The Lease's renewTime; None while there is no Lease."""
        return self.apiserver.admin.get(LEASE).json().get("spec", {}).get("renewTime")

    def agree(self, names: set[str]) -> bool:
        """These pods Running with one container, in the API exactly as the kubelet says."""
        api, kubelet = self.api_pods(), self.kubelet_pods()
        return all(n in api and n in kubelet and view(api[n]) == view(kubelet[n])
                   and view(api[n])[0] == "Running" and len(view(api[n])[1]) == 1 for n in names)

    def whole(self, wanted_api: set[str], wanted_static: set[str]) -> bool:
        """Every wanted pod agrees; one mirror pod per static pod; nothing else in the API."""
        api = self.api_pods()
        mirrors = [n for n, p in api.items() if MIRROR in p["metadata"].get("annotations", {})]
        wanted = wanted_api | {f"{s}-node1" for s in wanted_static}
        return (set(api) == wanted and sorted(mirrors) == sorted(f"{s}-node1" for s in wanted_static)
                and self.agree(wanted))

    def containers(self) -> dict[str, tuple[str, str]]:
        """name -> (pod UID in the API, container ID), for the pods in the API."""
        return {n: (p["metadata"]["uid"], view(p)[1][0][1]) for n, p in self.api_pods().items() if view(p)[1]}


class Running:
    """A pod waited for until it is Running in the API as the kubelet says, noting when the
    kubelet's /pods first said Running."""

    def __init__(self, node: Node, name: str) -> None:
        self.node, self.name = node, name
        self.in_the_kubelet_at = math.inf

    def in_the_api(self) -> bool:
        pod = self.node.kubelet_pods().get(self.name)
        if pod is not None and view(pod)[0] == "Running":
            self.in_the_kubelet_at = min(self.in_the_kubelet_at, time.monotonic())
        if not self.node.agree({self.name}):
            return False
        self.in_the_kubelet_at = min(self.in_the_kubelet_at, time.monotonic())  # it ran since the look above
        return True


def test_api_server_restarted_and_faulted_under_churn_loses_and_restarts_nothing(apiserver, containerd, tmp_path):
    rng = random.Random(SEED)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    wanted_api, wanted_static = set(), set()
    for i in range(PODS // 2):
        write_manifest(manifests, pod_manifest(f"s{i}", [container("c", TRAPPING_LOOP)], terminationGracePeriodSeconds=1))
        wanted_static.add(f"s{i}")
    daemon = start_daemon(tmp_path, apiserver, containerd, manifests)
    try:
        node = Node(apiserver, daemon)
        for i in range(PODS):
            assert apiserver.admin.post(PODS_PATH, json=api_pod(f"a{i}")).status_code == 201
            wanted_api.add(f"a{i}")
        # The Lease too: it is created a renewal interval after the Node when it looked first.
        daemon.wait_for(lambda: node.ready() and node.renewed() is not None and node.whole(wanted_api, wanted_static),
                        "every pod Running and the Lease created", CONVERGE)
        serial = PODS
        leases, agreed, recoveries, mirrored, lags = ({kind: [] for kind in KINDS} for _ in range(5))
        for n in range(EPISODES):
            kind = KINDS[n % len(KINDS)]
            stable = node.containers()
            touched, before = set(), wanted_api | {f"{s}-node1" for s in wanted_static}
            # Churn through the API: one pod created, one deleted (gracefully).
            name, serial = f"a{serial}", serial + 1
            assert apiserver.admin.post(PODS_PATH, json=api_pod(name)).status_code == 201
            wanted_api.add(name)
            gone = rng.choice(sorted(wanted_api - {name}))
            assert apiserver.admin.delete(f"{PODS_PATH}/{gone}").status_code == 200
            wanted_api.discard(gone)
            touched |= {name, gone}
            time.sleep(rng.uniform(0.0, 1.0))  # the fault lands mid-start, mid-termination or at rest
            lease = node.renewed()
            outage = rng.uniform(1.0, DOWN)
            if kind in ("kill", "terminate"):
                getattr(apiserver, kind)()
                static = f"s{serial}"  # a static pod added while the API server is away
                serial += 1
                write_manifest(manifests, pod_manifest(static, [container("c", TRAPPING_LOOP)],
                                                       terminationGracePeriodSeconds=1))
                wanted_static.add(static)
                touched.add(f"{static}-node1")
                time.sleep(outage)  # an outage, not a check: nothing is asserted of it
                apiserver.restart()
            else:
                getattr(apiserver, kind)(duration=outage)  # node identities only: admin is spared
                name, serial = f"a{serial}", serial + 1  # a pod created during the fault
                assert apiserver.admin.post(PODS_PATH, json=api_pod(name)).status_code == 201
                wanted_api.add(name)
                touched.add(name)
                time.sleep(outage)
            back = time.monotonic()
            if kind in ("kill", "terminate"):
                # Measured first, so that no other wait delays it. A generous wait, then the bound.
                running = Running(node, f"{static}-node1")
                daemon.wait_for(running.in_the_api, f"episode {n + 1} ({kind}): the static pod added during the "
                                "outage Running in its mirror pod", CONVERGE)
                done = time.monotonic()
                mirrored[kind].append(done - back)
                lags[kind].append(done - max(back, running.in_the_kubelet_at))
                assert lags[kind][-1] <= MIRROR_BOUND, (
                    f"episode {n + 1} ({kind}): the mirror pod of {static} Running in the API "
                    f"{lags[kind][-1]:.1f}s after the API server answered again and the kubelet ran it "
                    f"(bound {MIRROR_BOUND:g}s)")
            daemon.wait_for(lambda: node.ready() and node.renewed() != lease,
                            f"episode {n + 1} ({kind}): the Node Ready and its Lease renewed", CONVERGE)
            leases[kind].append(time.monotonic() - back)
            daemon.wait_for(lambda: node.agree(before & (wanted_api | {f"{s}-node1" for s in wanted_static})),
                            f"episode {n + 1} ({kind}): the pods from before in the API as the kubelet says", CONVERGE)
            agreed[kind].append(time.monotonic() - back)
            daemon.wait_for(lambda: node.whole(wanted_api, wanted_static) and node.ready() and node.renewed() != lease,
                            f"episode {n + 1} ({kind}): every pod Running, the API as the kubelet says, "
                            "one mirror pod per static pod, the Node Ready and its Lease renewed", CONVERGE)
            recoveries[kind].append(time.monotonic() - back)
            print(f"\nepisode {n + 1} ({kind}, {outage:.1f}s): lease {leases[kind][-1]:.1f}, pods from before "
                  f"{agreed[kind][-1]:.1f}, whole {recoveries[kind][-1]:.1f}"
                  + (f", new static pod {mirrored[kind][-1]:.1f} ({lags[kind][-1]:.1f} after it ran)"
                     if kind in ("kill", "terminate") else ""))
            now = node.containers()
            untouched = {name: value for name, value in stable.items() if name not in touched}
            assert {name: now.get(name) for name in untouched} == untouched, f"episode {n + 1} ({kind}): a pod changed"
            assert all(c[2] == 0 for p in node.kubelet_pods().values() for c in view(p)[1]), "a container restarted"
        assert "Traceback" not in daemon.log()
    finally:
        daemon.stop()
    print(f"\nchaos: seed {SEED}, {PODS} API pods and {len(wanted_static)} static pods at the end, {EPISODES} "
          "episodes; seconds after the API server was back until the Lease was renewed / the pods from before "
          "agreed / the node was whole (new pods and mirror pods too), max: " + "; ".join(
              f"{kind} ({len(times)}) {max(leases[kind]):.1f} / {max(agreed[kind]):.1f} / {max(times):.1f} "
              f"(whole: median {statistics.median(times):.1f})" for kind, times in recoveries.items() if times)
          + "; the static pod added during the outage Running in its mirror pod, max (median), from the API "
          "server answering / from the later of that and the kubelet running it: " + "; ".join(
              f"{kind} ({len(times)}) {max(times):.1f} ({statistics.median(times):.1f}) / "
              f"{max(lags[kind]):.1f} ({statistics.median(lags[kind]):.1f})"
              for kind, times in mirrored.items() if times))
