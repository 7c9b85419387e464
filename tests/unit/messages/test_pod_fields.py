"""Every field the API defines for a pod's spec reaches pykubelet: none is dropped on
decoding (checked against the official v1.36 schemas from kubernetes-validate)."""

from __future__ import annotations

import importlib.resources
import json

import msgspec
import pytest

from pykubelet.messages import pod as P

SCHEMAS = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / "v1.36.0-local"


@pytest.mark.parametrize(
    "struct, schema",
    [
        (P.PodSpec, "podspec-v1.json"),
        (P.Container, "container-v1.json"),
        (P.Volume, "volume-v1.json"),
        (P.VolumeMount, "volumemount-v1.json"),
        (P.EnvVar, "envvar-v1.json"),
        (P.EnvVarSource, "envvarsource-v1.json"),
        (P.EnvFromSource, "envfromsource-v1.json"),
        (P.ConfigMapVolumeSource, "configmapvolumesource-v1.json"),
        (P.SecretVolumeSource, "secretvolumesource-v1.json"),
        (P.DownwardAPIVolumeFile, "downwardapivolumefile-v1.json"),
        (P.ProjectedVolumeSource, "projectedvolumesource-v1.json"),
        (P.VolumeProjection, "volumeprojection-v1.json"),
        (P.ServiceAccountTokenProjection, "serviceaccounttokenprojection-v1.json"),
        (P.SecurityContext, "securitycontext-v1.json"),
        (P.PodSecurityContext, "podsecuritycontext-v1.json"),
        (P.PodDNSConfig, "poddnsconfig-v1.json"),
        (P.HostAlias, "hostalias-v1.json"),
    ],
)
def test_every_api_field_of_a_pod_spec_is_decoded(struct, schema):
    api_fields = set(json.loads((SCHEMAS / schema).read_text())["properties"])
    modeled = {f.encode_name for f in msgspec.structs.fields(struct)}
    assert api_fields - modeled == set()
    assert modeled - api_fields == set()


def test_host_pid_and_ipc_use_the_api_names():
    spec = msgspec.convert({"hostPID": True, "hostIPC": True}, P.PodSpec)
    assert spec.host_pid and spec.host_ipc
    assert msgspec.to_builtins(spec) == {"hostPID": True, "hostIPC": True}


def test_a_volume_names_its_type():
    assert msgspec.convert({"name": "v", "persistentVolumeClaim": {"claimName": "c"}}, P.Volume).type == "persistentVolumeClaim"
    assert msgspec.convert({"name": "v", "downwardAPI": {}}, P.Volume).type == "downwardAPI"
    assert P.Volume(name="v").type == ""
