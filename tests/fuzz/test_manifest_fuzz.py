"""Static pod manifests from outside (YAML and JSON bytes) through decode_manifests and the
file source's ManifestPath: every input is pods or a ManifestError naming the manifest."""

from __future__ import annotations

import json
import os

import msgspec
import yaml
from hypothesis import example, given, strategies as st

from pykubelet.actors.sources.file import ManifestPath
from pykubelet.messages.pod import Pod
from pykubelet.pods.manifest import ManifestError, decode_manifests

from .support import scratch_directory, tried, valid

ORIGIN = "/etc/kubernetes/manifests/fuzz.yaml"
NODE = "node-1"

names = st.from_regex(r"[a-z][a-z0-9-]{0,14}[a-z0-9]", fullmatch=True)
images = st.sampled_from(["nginx", "nginx:1.25", "registry.k8s.io/pause:3.10", "busybox@sha256:" + "a" * 64])


@st.composite
def containers(draw, volume_names: list[str]):
    container: dict = {"name": draw(names), "image": draw(images)}
    if draw(st.booleans()):
        container["command"] = draw(st.lists(st.text(max_size=10), max_size=3))
    if draw(st.booleans()):
        container["ports"] = [{"containerPort": p} for p in draw(st.lists(st.integers(1, 65535), max_size=2, unique=True))]
    if draw(st.booleans()):
        container["env"] = [{"name": n, "value": draw(st.text(max_size=10))} for n in draw(st.lists(names, max_size=3))]
    if volume_names and draw(st.booleans()):
        container["volumeMounts"] = [{"name": draw(st.sampled_from(volume_names)), "mountPath": "/data"}]
    if draw(st.booleans()):
        container["livenessProbe"] = {"exec": {"command": ["true"]}, "periodSeconds": draw(st.integers(0, 60))}
    return container


@st.composite
def valid_manifests(draw) -> dict:
    volume_names = draw(st.lists(names, max_size=3, unique=True))
    volumes = [
        {"name": n, "hostPath": {"path": "/var/" + n}} if draw(st.booleans()) else {"name": n, "emptyDir": {}}
        for n in volume_names
    ]
    specs = draw(st.lists(containers(volume_names), min_size=1, max_size=3, unique_by=lambda c: c["name"]))
    spec: dict = {"containers": specs}
    if volumes:
        spec["volumes"] = volumes
    for key, values in (("restartPolicy", ["Always", "OnFailure", "Never"]), ("dnsPolicy", ["Default", "ClusterFirst"])):
        if draw(st.booleans()):
            spec[key] = draw(st.sampled_from(values))
    if draw(st.booleans()):
        spec["hostNetwork"] = draw(st.booleans())
        for c in specs:
            for port in c.get("ports", []):
                port["hostPort"] = port["containerPort"] if spec["hostNetwork"] else 0
    metadata: dict = {"name": draw(names)}
    if draw(st.booleans()):
        metadata["namespace"] = draw(names)
    if draw(st.booleans()):
        metadata["labels"] = draw(st.dictionaries(names, names, max_size=3))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _paths(inner, (*prefix, index))


@st.composite
def mutated_manifests(draw) -> dict:
    """A valid manifest with a few fields replaced by, or given, values of any JSON type."""
    manifest = draw(valid_manifests())
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(list(_paths(manifest))))
        if not path:
            continue
        parent = manifest
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["hostPID", "secret", "envFrom", "projected", "valueFrom", "x"]))] = draw(json_values)
        elif isinstance(parent, list):
            parent.append(draw(json_values))
    return manifest


def encode(manifest, as_json: bool) -> bytes:
    return json.dumps(manifest).encode() if as_json else yaml.safe_dump(manifest).encode()


def decode_or_error(data: bytes, source: str = "file") -> list[Pod] | ManifestError:
    tried("manifest")
    try:
        pods = decode_manifests(data, origin=ORIGIN, source=source, node_name=NODE)
    except ManifestError as error:
        assert str(error).startswith(f"manifest {ORIGIN}: "), error
        assert error.message, error
        return error
    valid("manifest")
    assert all(isinstance(pod, Pod) for pod in pods)
    return pods


@given(valid_manifests(), st.booleans())
def test_a_valid_manifest_decodes_the_same_from_yaml_and_json(manifest, as_json):
    pods = decode_or_error(encode(manifest, as_json))
    assert isinstance(pods, list) and len(pods) == 1, pods
    assert pods == decode_or_error(encode(manifest, not as_json))


@given(valid_manifests())
def test_a_decoded_pod_encoded_again_decodes_to_the_same_pod(manifest):
    (pod,) = decode_or_error(encode(manifest, as_json=False))
    # The decoded pod carries its static identity; given its manifest name back, decoding
    # its JSON keeps the UID and finds every default already set.
    again = msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, name=manifest["metadata"]["name"]))
    assert decode_or_error(msgspec.json.encode(again)) == [pod]
    assert msgspec.json.decode(msgspec.json.encode(pod), type=Pod) == pod


@given(mutated_manifests(), st.booleans(), st.sampled_from(["file", "http"]))
@example({"apiVersion": "v1", "kind": "Pod", "spec": [1]}, False, "file")
@example({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": 5}}, True, "file")
@example({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"volumes": [{1: "a", "b": "c"}]}}, False, "file")
@example({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": [{"name": "a", "env": 3}]}}, False, "file")
def test_a_mutated_manifest_is_pods_or_a_manifest_error(manifest, as_json, source):
    if not as_json or all(isinstance(k, str) for path in _paths(manifest) for k in path):
        decode_or_error(encode(manifest, as_json), source)


@st.composite
def mutated_bytes(draw) -> bytes:
    data = bytearray(encode(draw(valid_manifests()), draw(st.booleans())))
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["flip", "insert", "delete"]))
        if action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8) | st.sampled_from([b"{", b"[", b":", b"\n- ", b"&a ", b"*a", b"!!binary ", b"\t", b"\xef\xbb\xbf"]))
        elif data and at < len(data):
            if action == "flip":
                data[at] ^= 1 << draw(st.integers(0, 7))
            else:
                del data[at : at + draw(st.integers(1, 16))]
    return bytes(data)


@given(mutated_bytes())
@example(b"[" * 5000)
@example(b"{" * 5000)
@example(b"{\"\x80apiVersion\": \"v1\"}")
@example(b"a: &a [*a]\n")
@example(b"\xef\xbb\xbf{\"kind\": \"Pod\"}")
def test_mutated_manifest_bytes_are_pods_or_a_manifest_error(data):
    decode_or_error(data)


@given(st.binary(max_size=512) | st.text(max_size=512).map(str.encode))
def test_arbitrary_bytes_are_a_manifest_error_or_pods(data):
    decode_or_error(data, "http")


_DIRECTORY = scratch_directory("pykubelet-fuzz-manifests-")


@given(st.lists(mutated_bytes() | valid_manifests().map(lambda m: encode(m, False)), min_size=1, max_size=3))
def test_the_file_source_reports_pods_or_problems_for_any_files(contents):
    for name in os.listdir(_DIRECTORY):
        os.unlink(os.path.join(_DIRECTORY, name))
    for index, data in enumerate(contents):
        with open(os.path.join(_DIRECTORY, f"{index}.yaml"), "wb") as f:
            f.write(data)
    tried("file source")
    manifests = ManifestPath(_DIRECTORY, node_name=NODE)
    manifests.scan(full=True)
    update = manifests.source_pods()
    files_with_pods = {pod.metadata.annotations.get("kubernetes.io/config.hash") for pod in update.pods}
    assert len(files_with_pods) == len(update.pods)
    assert all(problem.origin.startswith(_DIRECTORY) and problem.message for problem in update.problems)
    assert len(update.pods) + len(update.problems) >= len(contents)
    if not update.problems:
        valid("file source")
