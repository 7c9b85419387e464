"""A pod as a real cluster sends it, run by a pod worker on a private containerd: env from
the downward API, ConfigMaps, Secrets and Services with $(VAR) expansion; configMap,
secret (tmpfs), downwardAPI and projected volumes; subPathExpr; a non-root user with a
read-only root filesystem and fsGroup; the pod's hostname and kubelet-managed /etc/hosts.
The container writes what it sees to an emptyDir that the test reads from the host."""

from __future__ import annotations

import dataclasses
import os
import uuid

import msgspec
import pytest
import trio

from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.pod_workers.worker import PodWorker
from pykubelet.actors.volumes import ObjectCache, ObjectKey
from pykubelet.messages.pod import Pod
from pykubelet.messages.pod_updates import TerminatePod
from pykubelet.pods.env import ServiceEnv
from pykubelet.ports.cri.pods import read_pod_status
from pykubelet.ports.mounts import is_mount_point
from tests.integration.test_pod_worker import worker_deps
from tests.support.containerd import BUSYBOX_IMAGE

REPORT = (
    "id -u > /out/uid; id -g > /out/gid; id -G > /out/groups; env | sort > /out/env; hostname > /out/hostname; "
    "cat /etc/hosts > /out/hosts; cat /etc/resolv.conf > /out/resolv; "
    "(touch /rootfs-write 2>/dev/null && echo writable || echo read-only) > /out/rootfs; "
    "(touch /config/x 2>/dev/null && echo writable || echo read-only) > /out/configfs; "
    "echo sub > /sub/file; "
    "trap 'exit 0' TERM; while true; do cat /config/greeting > /out/greeting; sleep 0.2; done"
)


def cluster_pod(uid: str) -> Pod:
    return msgspec.convert({
        "metadata": {"name": "web", "namespace": "shop", "uid": uid, "labels": {"app": "web", "tier": "front"}},
        "spec": {
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 2, "hostname": "web-0",
            "subdomain": "backends", "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["db.local"]}],
            "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "runAsNonRoot": True},
            "volumes": [
                {"name": "out", "emptyDir": {}},
                {"name": "config", "configMap": {"name": "app-config"}},
                {"name": "creds", "secret": {"secretName": "db", "defaultMode": 0o440}},
                {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                {"name": "bundle", "projected": {"sources": [
                    {"configMap": {"name": "app-config", "items": [{"key": "greeting", "path": "hello.txt"}]}},
                    {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                ]}},
                {"name": "scratch", "emptyDir": {}},
            ],
            "containers": [{
                "name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", REPORT],
                "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
                "resources": {"limits": {"memory": "64Mi"}},
                "envFrom": [{"configMapRef": {"name": "app-config"}, "prefix": "CFG_"}],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "TIER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}},
                    {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "greeting"}}},
                    {"name": "MESSAGE", "value": "$(GREETING) from $(POD_NAME), $$(POD_NAME) stays"},
                ],
                "volumeMounts": [
                    {"name": "out", "mountPath": "/out"},
                    {"name": "config", "mountPath": "/config"},
                    {"name": "creds", "mountPath": "/creds"},
                    {"name": "info", "mountPath": "/info"},
                    {"name": "bundle", "mountPath": "/bundle"},
                    {"name": "scratch", "mountPath": "/sub", "subPathExpr": "$(POD_NAME)"},
                ],
            }],
        },
    }, Pod)


async def read_when(path: str, *, what: str, timeout: float = 30) -> str:
    with trio.fail_after(timeout):
        while not os.path.exists(path) or not open(path).read():
            await trio.sleep(0.1)
    return open(path).read()


@pytest.mark.containerd
async def test_a_pod_written_for_a_cluster_runs_unchanged_and_sees_a_config_map_edit(cri, containerd, tmp_path):
    objects = ObjectCache()
    deps = dataclasses.replace(await worker_deps(cri, containerd, tmp_path), objects=objects)
    deps = dataclasses.replace(deps, node=dataclasses.replace(
        deps.node, cluster_domain="cluster.local", cluster_dns=("10.96.0.10",), resolv_conf=str(tmp_path / "resolv.conf")))
    (tmp_path / "resolv.conf").write_text("nameserver 192.0.2.53\nsearch corp.example\noptions timeout:2\n")
    uid = str(uuid.uuid4())
    pod = cluster_pod(uid)
    config, db = ObjectKey("configmaps", "shop", "app-config"), ObjectKey("secrets", "shop", "db")
    objects.use("setup", {config, db})
    objects.set(config, {"data": {"greeting": "hello", "color": "blue"}})
    objects.set(db, {"data": {"password": "aHVudGVyMg=="}})  # hunter2
    objects.services[("default", "kubernetes")] = ServiceEnv(
        name="kubernetes", namespace="default", cluster_ip="10.96.0.1", ports=(("https", 443, "TCP"),))
    objects.services_synced.set()
    worker = PodWorker(uid, pod, deps)
    out = os.path.join(str(tmp_path), "pods", uid, "volumes", "kubernetes.io~empty-dir", "out")
    try:
        await worker.sync()
        greeting = await read_when(os.path.join(out, "greeting"), what="the container's report")
        assert greeting == "hello"
        assert open(os.path.join(out, "uid")).read().split() == ["1000"]
        assert open(os.path.join(out, "gid")).read().split() == ["3000"]
        assert "2000" in open(os.path.join(out, "groups")).read().split()  # fsGroup
        assert open(os.path.join(out, "rootfs")).read().strip() == "read-only"
        assert open(os.path.join(out, "configfs")).read().strip() == "read-only"  # API data mounts read-only
        env = dict(line.split("=", 1) for line in open(os.path.join(out, "env")).read().splitlines() if "=" in line)
        status = deps.statuses.get(uid)
        assert env["POD_NAME"] == "web" and env["TIER"] == "front" and env["MEM_MI"] == "64"
        assert env["POD_IP"] == status.pod_ip != ""
        assert env["DB_PASSWORD"] == "hunter2" and env["GREETING"] == "hello"
        assert env["CFG_color"] == "blue" and env["CFG_greeting"] == "hello"
        assert env["MESSAGE"] == "hello from web, $(POD_NAME) stays"
        assert env["KUBERNETES_SERVICE_HOST"] == "10.96.0.1" and env["KUBERNETES_SERVICE_PORT"] == "443"
        assert open(os.path.join(out, "hostname")).read().strip() == "web-0"
        hosts = open(os.path.join(out, "hosts")).read()
        assert hosts.startswith("# Kubernetes-managed hosts file.")
        assert f"{status.pod_ip}\tweb-0.backends.shop.svc.cluster.local\tweb-0" in hosts
        assert "10.1.2.3\tdb.local" in hosts
        # ClusterFirst: the cluster's DNS server, the namespace's search list before the
        # node's, ndots:5 (Go's dns configurer).
        resolv = open(os.path.join(out, "resolv")).read().splitlines()
        assert "nameserver 10.96.0.10" in resolv and "nameserver 192.0.2.53" not in resolv
        assert "search shop.svc.cluster.local svc.cluster.local cluster.local corp.example" in resolv
        options = next(line for line in resolv if line.startswith("options"))
        assert "ndots:5" in options and "timeout:2" not in options  # the node's options are not a pod's
        # The subPathExpr directory, named from the env, inside the scratch emptyDir.
        scratch = os.path.join(str(tmp_path), "pods", uid, "volumes", "kubernetes.io~empty-dir", "scratch")
        assert open(os.path.join(scratch, "web", "file")).read() == "sub\n"

        volumes = os.path.join(str(tmp_path), "pods", uid, "volumes")
        creds = os.path.join(volumes, "kubernetes.io~secret", "creds")
        assert is_mount_point(creds) and not is_mount_point(os.path.join(volumes, "kubernetes.io~configmap", "config"))
        password = os.path.join(creds, "password")
        assert open(password).read() == "hunter2"
        assert oct(os.stat(password).st_mode & 0o777) == "0o440" and os.stat(password).st_gid == 2000
        assert open(os.path.join(volumes, "kubernetes.io~downward-api", "info", "labels")).read() == 'app="web"\ntier="front"'
        bundle = os.path.join(volumes, "kubernetes.io~projected", "bundle")
        assert open(os.path.join(bundle, "hello.txt")).read() == "hello"
        assert open(os.path.join(bundle, "ns")).read() == "shop"

        # An edit of the ConfigMap reaches the running container at its next sync, without
        # a restart.
        running = {c.name: c.container_id for c in status.container_statuses}
        objects.set(config, {"data": {"greeting": "bonjour", "color": "blue"}})
        await worker.sync()
        with trio.fail_after(10):
            while open(os.path.join(out, "greeting")).read() != "bonjour":
                await trio.sleep(0.1)
        assert {c.name: c.container_id for c in deps.statuses.get(uid).container_statuses} == running
        assert open(os.path.join(bundle, "hello.txt")).read() == "bonjour"

        # A restarted kubelet (a new worker with a new status board) adopts the pod: no
        # container restarted, the tmpfs mounts re-used rather than stacked.
        deps = dataclasses.replace(deps, statuses=PodStatuses())
        worker = PodWorker(uid, pod, deps)
        await worker.sync()
        assert {c.name: c.container_id for c in deps.statuses.get(uid).container_statuses} == running
        assert sum(f" {creds} " in line for line in open("/proc/mounts")) == 1
    finally:
        await worker.terminate(TerminatePod(reason="test over"))
    assert not os.path.exists(os.path.join(str(tmp_path), "pods", uid))
    assert not any(uid in line for line in open("/proc/mounts"))


@pytest.mark.containerd
async def test_a_missing_secret_key_holds_the_container_with_create_container_config_error(cri, containerd, tmp_path):
    objects = ObjectCache()
    objects.services_synced.set()
    deps = dataclasses.replace(await worker_deps(cri, containerd, tmp_path), objects=objects)
    uid = str(uuid.uuid4())
    pod = msgspec.convert({
        "metadata": {"name": "needy", "namespace": "shop", "uid": uid},
        "spec": {"hostNetwork": True, "terminationGracePeriodSeconds": 2, "containers": [{
            "name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent", "command": ["sleep", "60"],
            "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}],
        }]},
    }, Pod)
    db = ObjectKey("secrets", "shop", "db")
    objects.use("setup", {db})
    objects.set(db, {"data": {"user": "YWRtaW4="}})
    worker = PodWorker(uid, pod, deps)
    try:
        await worker.sync()
        (app,) = deps.statuses.get(uid).container_statuses
        assert app.state.waiting is not None and app.state.waiting.reason == "CreateContainerConfigError"
        assert app.state.waiting.message == "couldn't find key password in Secret shop/db"
        assert any(e.reason == "Failed" and "couldn't find key password" in e.message for e in deps.events.events())
    finally:
        await worker.terminate(TerminatePod(reason="test over"))


@pytest.mark.containerd
async def test_a_volume_pykubelet_cannot_mount_fails_the_start_with_failed_mount(cri, containerd, tmp_path):
    deps = await worker_deps(cri, containerd, tmp_path)
    uid = str(uuid.uuid4())
    pod = msgspec.convert({
        "metadata": {"name": "claims", "namespace": "shop", "uid": uid},
        "spec": {"hostNetwork": True, "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}],
                 "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "command": ["sleep", "60"],
                                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]},
    }, Pod)
    worker = PodWorker(uid, pod, deps)
    try:
        retry = await worker.sync()
        assert retry == 1.0
        status = deps.statuses.get(uid)
        assert status.phase == "Pending"
        assert status.container_statuses[0].state.waiting.reason == "ContainerCreating"
        (event,) = [e for e in deps.events.events() if e.reason == "FailedMount"]
        assert event.type == "Warning" and event.message == (
            'MountVolume.SetUp failed for volume "data" : volume type persistentVolumeClaim is not supported by pykubelet'
        )
        assert (await cri.list_pod_sandbox()) == [] or all(
            s.metadata.uid != uid for s in await cri.list_pod_sandbox())  # nothing was created
    finally:
        await worker.terminate(TerminatePod(reason="test over"))


@pytest.mark.containerd
async def test_a_pod_past_its_active_deadline_is_stopped_and_failed(cri, containerd, tmp_path):
    deps = await worker_deps(cri, containerd, tmp_path)
    uid = str(uuid.uuid4())
    pod = msgspec.convert({
        "metadata": {"name": "batch", "namespace": "shop", "uid": uid},
        "spec": {"hostNetwork": True, "activeDeadlineSeconds": 2, "terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                                 "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]}]},
    }, Pod)
    worker = PodWorker(uid, pod, deps)
    try:
        wake_in = await worker.sync()
        assert deps.statuses.get(uid).phase in ("Pending", "Running")
        assert wake_in is not None and wake_in <= 2  # the worker wakes at the deadline
        with trio.fail_after(20):
            while deps.statuses.get(uid).phase != "Failed":
                await trio.sleep(0.5)
                await worker.sync()
        status = deps.statuses.get(uid)
        assert status.reason == "DeadlineExceeded"
        assert status.message == "Pod was active on the node longer than the specified deadline"
        runtime = await read_pod_status(cri, uid)
        assert [c.state for c in runtime.containers] == ["exited"]
        assert any(e.reason == "DeadlineExceeded" for e in deps.events.events())
    finally:
        await worker.terminate(TerminatePod(reason="test over"))
