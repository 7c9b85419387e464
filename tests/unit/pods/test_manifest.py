"""Static pod manifests: decoding, API defaults, validation and static pod identity."""

from __future__ import annotations

import hashlib
import json

import msgspec
import pytest

from pykubelet.messages.pod import Pod, PodStatus, Toleration
from pykubelet.messages.pod_updates import ManifestProblem
from pykubelet.pods.manifest import (
    CONFIG_HASH,
    CONFIG_SEEN,
    CONFIG_SOURCE,
    ManifestError,
    apply_api_defaults,
    decode_manifests,
    default_image_pull_policy,
    drop_duplicate_pods,
)

ORIGIN = "/etc/kubernetes/manifests/web.yaml"
URL = "http://127.0.0.1:8080/pods"

WEB = b"""\
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: kube-system
  labels: {app: web}
spec:
  containers:
  - name: web
    image: nginx:1.25
"""


def pod_yaml(containers: str, *, metadata: str = "name: web", spec: str = "") -> bytes:
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{{metadata}}}\nspec:\n{spec}  containers:\n{containers}"
    ).encode()


def decode_one(data: bytes, *, origin: str = ORIGIN, source: str = "file", node_name: str = "node-1") -> Pod:
    [pod] = decode_manifests(data, origin=origin, source=source, node_name=node_name)
    return pod


def error_of(data: bytes, *, source: str = "file", origin: str = ORIGIN) -> str:
    with pytest.raises(ManifestError) as caught:
        decode_manifests(data, origin=origin, source=source, node_name="node-1")
    assert caught.value.origin == origin
    return str(caught.value)


# --- bad input -> one exact message naming the manifest and the field -----------------


@pytest.mark.parametrize(
    "data, message",
    [
        (
            pod_yaml("  - name: web\n    image: a\n  - name: web\n    image: b\n"),
            'spec.containers[1].name: duplicate "web"',
        ),
        (b"apiVersion: v1\nkind: Pod\nmetadata: name: web\n", "not valid YAML at line 3: mapping values are not allowed in this context"),
        (
            b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
            'kind "Deployment" is not a Pod (a static pod manifest holds one Pod)',
        ),
        (
            b"apiVersion: v1\nkind: PodList\nitems: []\n",
            'kind "PodList" is not a Pod (a static pod manifest holds one Pod)',
        ),
        (b"apiVersion: v1\nmetadata: {name: web}\n", 'kind: required ("kind: Pod")'),
        (b"kind: Pod\nmetadata: {name: web}\n", 'apiVersion: required ("apiVersion: v1")'),
        (b"apiVersion: v2\nkind: Pod\n", 'apiVersion "v2" is not v1 (a Pod is apiVersion v1)'),
        (pod_yaml("  - name: web\n    image: a\n", metadata="namespace: x"), "metadata.name: required"),
        (b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {}\n", "spec.containers: required (at least one container)"),
        (pod_yaml("  - name: web\n    image: Bad Image\n"), 'spec.containers[0].image: invalid reference format "Bad Image"'),
        (pod_yaml("  - name: web\n"), "spec.containers[0].image: required"),
        (pod_yaml("  - image: a\n"), "spec.containers[0].name: required"),
        (
            pod_yaml("  - name: Web_1\n    image: a\n"),
            'spec.containers[0].name: "Web_1" is not a DNS-1123 label (lowercase letters, digits and "-", '
            "starting and ending alphanumeric)",
        ),
        (
            pod_yaml("  - name: web\n    image: a\n", metadata="name: Web.App"),
            'metadata.name: "Web.App" is not a DNS-1123 subdomain (lowercase letters, digits, "-" and ".", '
            "starting and ending alphanumeric)",
        ),
        (
            pod_yaml("  - name: web\n    image: a\n", metadata="name: web, namespace: kube.system"),
            'metadata.namespace: "kube.system" is not a DNS-1123 label (lowercase letters, digits and "-", '
            "starting and ending alphanumeric)",
        ),
        (
            pod_yaml("  - name: web\n    image: a\n", spec="  restartPolicy: Sometimes\n"),
            'spec.restartPolicy: unsupported value "Sometimes" (one of Always, OnFailure, Never)',
        ),
        (
            pod_yaml("  - name: web\n    image: a\n    imagePullPolicy: Maybe\n"),
            'spec.containers[0].imagePullPolicy: unsupported value "Maybe" (one of Always, IfNotPresent, Never)',
        ),
        (
            pod_yaml("  - name: web\n    image: a\n    ports: [{containerPort: 70000}]\n"),
            "spec.containers[0].ports[0].containerPort: 70000 is not a port number (1-65535)",
        ),
        (
            pod_yaml("  - name: web\n    image: a\n    ports: [{containerPort: 80, protocol: HTTP}]\n"),
            'spec.containers[0].ports[0].protocol: unsupported value "HTTP" (one of TCP, UDP, SCTP)',
        ),
        (
            pod_yaml("  - name: web\n    image: a\n    ports: [{containerPort: http}]\n"),
            "spec.containers[0].ports[0].containerPort: expected int, got str",
        ),
        (
            pod_yaml("  - name: web\n    image: a\n    ports: [{name: http}]\n"),
            "spec.containers[0].ports[0].containerPort: required",
        ),
        (
            pod_yaml("  - name: web\n    image: a\n    env: [{name: A=B, value: x}]\n"),
            'spec.containers[0].env[0].name: "A=B" is not a valid environment variable name (printable ASCII without "=")',
        ),
        (
            pod_yaml("  - name: web\n    image: a\n    volumeMounts: [{name: data, mountPath: /data}]\n"),
            'spec.containers[0].volumeMounts[0].name: not found (no volume "data" in spec.volumes)',
        ),
        (
            pod_yaml("  - name: web\n    image: a\n    livenessProbe: {periodSeconds: 5}\n"),
            "spec.containers[0].livenessProbe: must specify a handler (exec, httpGet, tcpSocket or grpc)",
        ),
        (
            pod_yaml("  - name: web\n    image: a\n    livenessProbe: {tcpSocket: {port: 80}, successThreshold: 2}\n"),
            "spec.containers[0].livenessProbe.successThreshold: must be 1 for a livenessProbe",
        ),
        (
            pod_yaml("  - name: web\n    image: a\n", spec="  volumes: [{name: cfg, configMap: {name: x}}]\n"),
            "spec.volumes[0].configMap: volume type not supported in a static pod (a static pod may use hostPath, "
            "emptyDir, downwardAPI and projected downwardAPI volumes)",
        ),
        (
            pod_yaml(
                "  - name: web\n    image: a\n",
                spec="  volumes: [{name: t, projected: {sources: [{serviceAccountToken: {path: token}}]}}]\n",
            ),
            "spec.volumes[0].projected.sources[0].serviceAccountToken: a static pod may not reference API objects "
            "(it must run without the API server); use hostPath or downwardAPI",
        ),
        (
            pod_yaml("  - name: web\n    image: a\n    env: [{name: P, valueFrom: {secretKeyRef: {name: s, key: k}}}]\n"),
            "spec.containers[0].env[0].valueFrom.secretKeyRef: a static pod may not reference ConfigMaps or Secrets",
        ),
        (
            pod_yaml("  - name: web\n    image: a\n", spec="  hostNetwork: true\n").replace(
                b"image: a\n", b"image: a\n    ports: [{containerPort: 80, hostPort: 8080}]\n"
            ),
            "spec.containers[0].ports[0].hostPort: must equal containerPort with hostNetwork",
        ),
        (
            pod_yaml("  - name: web\n    image: a\n", spec="  tolerations: [{operator: Exists, value: x}]\n"),
            'spec.tolerations[0].value: must be empty when operator is "Exists"',
        ),
        (
            pod_yaml("  - name: web\n    image: a\n    image: b\n"),
            'not valid YAML at line 8: key "image" given twice',
        ),
        (b"", "empty (a static pod manifest holds one Pod)"),
        (b"- a\n- b\n", "holds a YAML list, not a Pod object"),
        (WEB + b"---\n" + WEB, "holds 2 YAML documents; a static pod manifest holds one Pod"),
        (b'{\n  "apiVersion": "v1",\n  kind: "Pod"\n}\n', "not valid JSON at line 3: object keys must be strings"),
        (b"apiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {version: 2}}\n", "metadata.labels: expected str, got int"),
    ],
)
def test_a_bad_manifest_gets_one_message_naming_origin_and_field(data, message):
    assert error_of(data).startswith(f"manifest {ORIGIN}: {message}")


def test_every_problem_of_a_pod_is_reported_at_once():
    data = pod_yaml("  - name: web\n    image: Bad Image\n  - name: web\n    image: b\n", spec="  dnsPolicy: Cluster\n")
    assert error_of(data) == (
        f'manifest {ORIGIN}: spec.containers[0].image: invalid reference format "Bad Image"; '
        'spec.containers[1].name: duplicate "web"; '
        'spec.dnsPolicy: unsupported value "Cluster" (one of ClusterFirstWithHostNet, ClusterFirst, Default, None)'
    )


def test_size_is_checked_before_parsing():
    data = b"\x00" * int(1.2 * 1024 * 1024)  # not YAML at all: the size is what is wrong
    assert error_of(data) == f"manifest {ORIGIN}: 1.2 MiB is over the 1 MiB limit of a manifest"


def test_url_body_that_is_neither_pod_nor_list():
    assert error_of(b"apiVersion: v1\nkind: Service\n", source="http", origin=URL) == (
        f'manifest {URL}: kind "Service" is not a Pod or a PodList (a manifest URL serves a Pod or a PodList)'
    )


def test_a_bad_item_of_a_pod_list_names_its_index():
    body = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "PodList",
            "items": [
                {"metadata": {"name": "a"}, "spec": {"containers": [{"name": "a", "image": "a"}]}},
                {"metadata": {"name": "b"}, "spec": {"containers": [{"name": "b", "image": "B"}]}},
            ],
        }
    ).encode()
    assert error_of(body, source="http", origin=URL) == (
        f'manifest {URL}: items[1].spec.containers[0].image: invalid reference format "B"'
    )


# --- decoding ------------------------------------------------------------------------


def test_json_and_yaml_give_the_same_pod():
    as_json = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "kube-system", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]},
        },
        indent="\t",  # tabs: not YAML, still JSON
    ).encode()
    assert decode_one(as_json) == decode_one(WEB)


def test_pod_list_from_a_url_gives_each_pod():
    body = b"""\
apiVersion: v1
kind: PodList
items:
- metadata: {name: a}
  spec: {containers: [{name: a, image: busybox}]}
- metadata: {name: b}
  spec: {containers: [{name: b, image: busybox}]}
"""
    pods = decode_manifests(body, origin=URL, source="http", node_name="node-1")
    assert [p.metadata.name for p in pods] == ["a-node-1", "b-node-1"]
    assert len({p.metadata.uid for p in pods}) == 2


def test_nulls_and_unknown_fields_are_ignored_and_timestamps_stay_strings():
    data = WEB.replace(b"  labels: {app: web}\n", b"  labels:\n  creationTimestamp: 2024-01-02T03:04:05Z\n")
    data += b"    args:\n    securityContext: {privileged: true}\n"
    pod = decode_one(data)
    assert pod.metadata.labels == {}
    assert pod.metadata.creation_timestamp == "2024-01-02T03:04:05Z"
    assert pod.spec.containers[0].args == []


# --- API defaults --------------------------------------------------------------------


def test_api_defaults_fill_what_the_api_server_would():
    pod = decode_one(
        pod_yaml(
            "  - name: web\n    image: nginx\n    ports: [{containerPort: 80}]\n"
            "    resources: {limits: {cpu: 100m}}\n"
            "    readinessProbe: {httpGet: {port: 80}}\n"
            "    livenessProbe: {exec: {command: [/bin/true]}, periodSeconds: 5}\n",
            spec="  volumes: [{name: scratch}]\n",
        )
    )
    spec, [c] = pod.spec, pod.spec.containers
    assert pod.metadata.namespace == "default"
    assert (spec.restart_policy, spec.termination_grace_period_seconds, spec.dns_policy) == ("Always", 30, "ClusterFirst")
    assert (spec.scheduler_name, spec.enable_service_links, spec.priority) == ("default-scheduler", True, 0)
    assert c.image_pull_policy == "Always"
    assert (c.termination_message_path, c.termination_message_policy) == ("/dev/termination-log", "File")
    assert c.ports[0].protocol == "TCP" and c.ports[0].host_port == 0
    assert c.resources.requests == {"cpu": "100m"}
    readiness = c.readiness_probe
    assert (readiness.timeout_seconds, readiness.period_seconds, readiness.success_threshold, readiness.failure_threshold) == (
        1, 10, 1, 3,
    )
    assert (readiness.http_get.path, readiness.http_get.scheme) == ("/", "HTTP")
    assert c.liveness_probe.period_seconds == 5  # what the manifest says stays
    assert spec.volumes[0].empty_dir is not None  # a volume without a source is an emptyDir
    assert c.startup_probe is None  # no probe is invented


def test_host_network_ports_default_host_port_and_system_priority_classes():
    pod = decode_one(
        pod_yaml(
            "  - name: web\n    image: a\n    ports: [{containerPort: 80}]\n",
            spec="  hostNetwork: true\n  priorityClassName: system-node-critical\n",
        )
    )
    assert pod.spec.containers[0].ports[0].host_port == 80
    assert pod.spec.priority == 2000001000


@pytest.mark.parametrize(
    "image, policy",
    [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.25", "IfNotPresent"),
        ("127.0.0.1:5000/nginx", "Always"),
        ("127.0.0.1:5000/nginx:1.25", "IfNotPresent"),
        ("nginx@sha256:" + "a" * 64, "IfNotPresent"),
        ("nginx:latest@sha256:" + "a" * 64, "IfNotPresent"),
    ],
)
def test_default_image_pull_policy(image, policy):
    assert default_image_pull_policy(image) == policy


# --- static pod identity -------------------------------------------------------------


def expected_uid(data: bytes, *, origin: str, source: str, node_name: str) -> str:
    """The derivation, spelled out: MD5 over the API-defaulted pod as decoded (before
    the name suffix, namespace, nodeName and annotations), then the source facts."""
    raw = msgspec.convert(__import__("yaml").safe_load(data), Pod)
    hasher = hashlib.md5(msgspec.json.encode(apply_api_defaults(raw), order="deterministic"))
    if source == "file":
        hasher.update(f"host:{node_name}file:{origin}".encode())
    else:
        hasher.update(f"url:{origin}".encode())
    return hasher.hexdigest()


def test_static_pod_identity_from_a_file():
    pod = decode_one(WEB, node_name="Node-1")
    uid = expected_uid(WEB, origin=ORIGIN, source="file", node_name="Node-1")
    assert pod.metadata.uid == uid
    assert pod.metadata.name == "web-node-1"  # node name lowercased
    assert pod.metadata.namespace == "kube-system"
    assert pod.metadata.annotations == {CONFIG_HASH: uid, CONFIG_SOURCE: "file"}
    assert CONFIG_SEEN not in pod.metadata.annotations  # stamped by pod config, never hashed
    assert pod.spec.node_name == "Node-1"
    assert pod.spec.tolerations == [Toleration(operator="Exists", effect="NoExecute")]
    assert pod.status == PodStatus(phase="Pending")


def test_static_pod_identity_from_a_url_has_no_toleration_added():
    pod = decode_one(WEB, origin=URL, source="http")
    assert pod.metadata.uid == expected_uid(WEB, origin=URL, source="http", node_name="node-1")
    assert pod.metadata.annotations[CONFIG_SOURCE] == "http"
    assert pod.spec.tolerations == []


@pytest.mark.parametrize(
    "change",
    [
        {"data": WEB.replace(b"nginx:1.25", b"nginx:1.26")},
        {"data": WEB.replace(b"app: web", b"app: web2")},
        {"origin": "/etc/kubernetes/manifests/web2.yaml"},
        {"node_name": "node-2"},
    ],
)
def test_uid_changes_with_content_path_and_node(change):
    base = {"data": WEB, "origin": ORIGIN, "node_name": "node-1"}
    before = decode_one(**base).metadata.uid
    after = decode_one(**(base | change)).metadata.uid
    assert before != after


def test_uid_is_stable_and_explicit_defaults_do_not_change_it():
    explicit = WEB.replace(b"image: nginx:1.25\n", b"image: nginx:1.25\n    imagePullPolicy: IfNotPresent\n")
    assert decode_one(WEB).metadata.uid == decode_one(WEB).metadata.uid == decode_one(explicit).metadata.uid


def test_uid_set_in_the_manifest_is_kept():
    pod = decode_one(WEB.replace(b"  name: web\n", b"  name: web\n  uid: fixed-uid\n"))
    assert pod.metadata.uid == "fixed-uid" and pod.metadata.annotations[CONFIG_HASH] == "fixed-uid"


def test_existing_no_execute_exists_toleration_is_replaced_not_doubled():
    data = WEB + b"  tolerations: [{operator: Exists, effect: NoExecute, tolerationSeconds: 30}, {key: a, operator: Exists}]\n"
    assert decode_one(data).spec.tolerations == [
        Toleration(operator="Exists", effect="NoExecute"),
        Toleration(key="a", operator="Exists"),
    ]


def test_name_too_long_once_the_node_name_is_appended():
    name = "a" * 250
    message = error_of(pod_yaml("  - name: web\n    image: a\n", metadata=f"name: {name}"))
    assert message == (
        f'manifest {ORIGIN}: metadata.name: "{name}-node-1" (with the node name appended) is longer than 253 characters'
    )


# --- one pod per name ----------------------------------------------------------------


def test_duplicate_names_keep_the_first_and_report_the_others():
    a = decode_one(WEB, origin="/m/a.yaml")
    b = decode_one(WEB, origin="/m/b.yaml")
    kept, problems = drop_duplicate_pods([("/m/a.yaml", a), ("/m/b.yaml", b)], source="file")
    assert kept == [a]
    assert problems == [
        ManifestProblem(
            source="file",
            origin="/m/b.yaml",
            message='pod "kube-system/web-node-1" is already defined by /m/a.yaml; this one is ignored',
        )
    ]


@pytest.mark.parametrize(
    "probe, message",
    [
        ({"livenessProbe": {"periodSeconds": 5}},
         "spec.containers[0].livenessProbe: must specify a handler (exec, httpGet, tcpSocket or grpc)"),
        ({"livenessProbe": {"exec": {"command": ["true"]}, "tcpSocket": {"port": 80}}},
         "spec.containers[0].livenessProbe: may not specify more than one handler (exec, tcpSocket)"),
        ({"readinessProbe": {"httpGet": {"port": "web"}}},
         'spec.containers[0].readinessProbe.httpGet.port: no container port named "web" in this container\'s ports'),
        ({"readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": -1}},
         "spec.containers[0].readinessProbe.periodSeconds: must be greater than or equal to 0"),
        ({"livenessProbe": {"exec": {"command": []}}},
         "spec.containers[0].livenessProbe.exec.command: required (a probe's exec needs a command)"),
    ],
    ids=["no handler", "two handlers", "port name not found", "negative period", "empty exec command"],
)
def test_bad_probes_are_refused_naming_the_container_and_field(probe, message):
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "busybox:1", **probe}]}}
    with pytest.raises(ManifestError) as error:
        decode_manifests(json.dumps(doc).encode(), origin="/m/p.yaml", source="file", node_name="n")
    assert str(error.value) == f"manifest /m/p.yaml: {message}"
