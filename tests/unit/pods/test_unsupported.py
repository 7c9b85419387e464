"""unsupported_fields names, by API path with indexes, each field a pod sets that pykubelet
does not implement: refused when it would change what runs, ignored when the Go kubelet
ignores it too. A field left unset, empty or at the API's default is not named."""

from __future__ import annotations

import msgspec
import pytest

from pykubelet.messages.pod import Pod
from pykubelet.pods.unsupported import unsupported_fields, why_ignored

C = {"name": "c", "image": "busybox"}


def pod(spec: dict | None = None, status: dict | None = None) -> Pod:
    return msgspec.convert(
        {"metadata": {"name": "web", "namespace": "default", "uid": "u1"},
         "spec": {"containers": [C], **(spec or {})}, "status": status or {}},
        Pod,
    )  # fmt: skip


def container(**fields) -> dict:
    return {**C, **fields}


REFUSED = [
    ("runtimeClassName", {"runtimeClassName": "kata"}, "spec.runtimeClassName"),
    ("overhead", {"overhead": {"cpu": "250m"}}, "spec.overhead"),
    ("pod-resources", {"resources": {"limits": {"cpu": "1"}}}, "spec.resources"),
    ("resourceClaims", {"resourceClaims": [{"name": "gpu", "resourceClaimName": "g"}]}, "spec.resourceClaims"),
    ("hostUsers-false", {"hostUsers": False}, "spec.hostUsers"),
    ("ephemeral-not-started", {"ephemeralContainers": [{"name": "debug", "image": "busybox"}]},
     "spec.ephemeralContainers"),
    ("pod-seLinuxOptions", {"securityContext": {"seLinuxOptions": {"level": "s0:c1,c2"}}},
     "spec.securityContext.seLinuxOptions"),
    ("seLinuxChangePolicy", {"securityContext": {"seLinuxChangePolicy": "MountOption"}},
     "spec.securityContext.seLinuxChangePolicy"),
    ("restartPolicyRules", {"containers": [C, container(name="d", restartPolicy="Always", restartPolicyRules=[
        {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}])]},
     "spec.containers[1].restartPolicyRules"),
    ("container-restartPolicy", {"containers": [container(restartPolicy="Never")]}, "spec.containers[0].restartPolicy"),
    ("init-restartPolicy", {"initContainers": [container(name="i", restartPolicy="OnFailure")]},
     "spec.initContainers[0].restartPolicy"),
    ("volumeDevices", {"containers": [container(volumeDevices=[{"name": "blk", "devicePath": "/dev/xvda"}])]},
     "spec.containers[0].volumeDevices"),
    ("resources.claims", {"containers": [container(resources={"claims": [{"name": "gpu"}]})]},
     "spec.containers[0].resources.claims"),
    ("pod-appArmorProfile", {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}},
     "spec.securityContext.appArmorProfile"),
    ("container-appArmorProfile", {"containers": [container(securityContext={
        "appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}})]},
     "spec.containers[0].securityContext.appArmorProfile"),
    ("stopSignal", {"containers": [container(lifecycle={"stopSignal": "SIGUSR1"})]},
     "spec.containers[0].lifecycle.stopSignal"),
    ("supplementalGroupsPolicy-Strict", {"securityContext": {"supplementalGroupsPolicy": "Strict"}},
     "spec.securityContext.supplementalGroupsPolicy"),
    ("recursiveReadOnly", {"volumes": [{"name": "v", "emptyDir": {}}], "containers": [container(volumeMounts=[
        {"name": "v", "mountPath": "/v", "readOnly": True, "recursiveReadOnly": "Enabled"}])]},
     "spec.containers[0].volumeMounts[0].recursiveReadOnly"),
    ("fileKeyRef", {"containers": [container(env=[
        {"name": "A", "value": "1"}, {"name": "B", "value": "2"},
        {"name": "C", "valueFrom": {"fileKeyRef": {"path": "c.env", "volumeName": "cfg", "key": "C"}}}])]},
     "spec.containers[0].env[2].valueFrom.fileKeyRef"),
    ("container-seLinuxOptions", {"containers": [container(securityContext={"seLinuxOptions": {"type": "spc_t"}})]},
     "spec.containers[0].securityContext.seLinuxOptions"),
    ("init-seLinuxOptions", {"initContainers": [container(name="i", securityContext={
        "seLinuxOptions": {"user": "u"}})]},
     "spec.initContainers[0].securityContext.seLinuxOptions"),
    ("clusterTrustBundle", {"volumes": [{"name": "v", "projected": {"sources": [
        {"configMap": {"name": "x"}}, {"clusterTrustBundle": {"name": "b", "path": "ca.pem"}}]}}]},
     "spec.volumes[0].projected.sources[1].clusterTrustBundle"),
    ("podCertificate", {"volumes": [{"name": "e", "emptyDir": {}}, {"name": "v", "projected": {"sources": [
        {"podCertificate": {"signerName": "example.com/s", "keyType": "ED25519"}}]}}]},
     "spec.volumes[1].projected.sources[0].podCertificate"),
]  # fmt: skip

IGNORED = [
    ("imagePullSecrets", {"imagePullSecrets": [{"name": "regcred"}]}, "spec.imagePullSecrets"),
    ("automountServiceAccountToken", {"automountServiceAccountToken": False}, "spec.automountServiceAccountToken"),
    ("fsGroupChangePolicy", {"securityContext": {"fsGroupChangePolicy": "OnRootMismatch"}},
     "spec.securityContext.fsGroupChangePolicy"),
    ("preferred-node-affinity", {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}}]}}},
     "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"),
    ("podAffinity", {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "db"}}}]}}}, "spec.affinity.podAffinity"),
    ("podAntiAffinity", {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}},
     "spec.affinity.podAntiAffinity"),
    ("topologySpreadConstraints", {"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
     "spec.topologySpreadConstraints"),
    ("schedulingGates", {"schedulingGates": [{"name": "example.com/quota"}]}, "spec.schedulingGates"),
    ("schedulingGroup", {"schedulingGroup": {"podGroupName": "training"}}, "spec.schedulingGroup"),
    ("preemptionPolicy-never", {"preemptionPolicy": "Never"}, "spec.preemptionPolicy"),
    ("pod-windowsOptions", {"securityContext": {"windowsOptions": {"runAsUserName": "ContainerUser"}}},
     "spec.securityContext.windowsOptions"),
    ("container-windowsOptions", {"containers": [C, container(name="d", securityContext={
        "windowsOptions": {"hostProcess": True}})]}, "spec.containers[1].securityContext.windowsOptions"),
    ("resizePolicy", {"containers": [C, container(name="d", resizePolicy=[
        {"resourceName": "cpu", "restartPolicy": "RestartContainer"}])]}, "spec.containers[1].resizePolicy"),
]  # fmt: skip


@pytest.mark.parametrize("spec, path", [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_a_field_that_changes_what_runs_is_refused_by_its_path(spec, path):
    assert unsupported_fields(pod(spec)) == ((path,), ())


@pytest.mark.parametrize("spec, path", [case[1:] for case in IGNORED], ids=[case[0] for case in IGNORED])
def test_a_field_the_go_kubelet_ignores_too_is_only_ignored(spec, path):
    fields = unsupported_fields(pod(spec))
    assert (fields.refused, fields.ignored) == ((), (path,))
    assert why_ignored(path)  # the sync loop's warning has words for every ignored field


def test_the_warning_says_whose_field_it_is():
    assert why_ignored("spec.topologySpreadConstraints") == "is the scheduler's; the kubelet ignores it"
    assert why_ignored("spec.containers[3].securityContext.windowsOptions") == (
        "is for Windows nodes; the kubelet on Linux ignores it")


def test_ephemeral_containers_on_a_pod_that_already_started_are_warned_about_not_refused():
    # The API adds them to a running pod (kubectl debug); a kubelet restart must not fail it.
    debugged = pod({"ephemeralContainers": [{"name": "debug", "image": "busybox"}]},
                   status={"phase": "Running", "startTime": "2026-01-01T00:00:00Z"})
    assert unsupported_fields(debugged) == ((), ("spec.ephemeralContainers",))


@pytest.mark.parametrize(
    "spec",
    [
        {},
        # empty, or what the API writes when the pod asks for nothing
        {"resources": {}, "resourceClaims": [], "ephemeralContainers": [], "imagePullSecrets": [], "overhead": {},
         "runtimeClassName": "", "topologySpreadConstraints": [], "schedulingGates": []},
        {"hostUsers": True},
        {"preemptionPolicy": "PreemptLowerPriority"},
        {"securityContext": {"seLinuxOptions": {}, "runAsUser": 1000}},
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}}},
        # a sidecar; a container-level restartPolicy that repeats the pod's
        {"initContainers": [container(name="s", restartPolicy="Always")]},
        {"restartPolicy": "Never", "containers": [container(restartPolicy="Never")]},
        {"containers": [container(volumeDevices=[], resources={"claims": [], "requests": {"cpu": "1"}},
                                  env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])]},
        {"volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]},
    ],
    ids=["nothing", "empty", "hostUsers-true", "default-preemption", "empty-seLinuxOptions", "required-affinity",
         "sidecar", "restartPolicy-as-pod", "implemented-container-fields", "implemented-projection"],
)  # fmt: skip
def test_a_pod_that_sets_nothing_unsupported_is_clean(spec):
    assert unsupported_fields(pod(spec)) == ((), ())


def test_a_pod_setting_several_gets_every_one_named_pod_fields_first():
    mixed = pod({
        "hostUsers": False,
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}],
        "initContainers": [container(name="i", volumeDevices=[{"name": "b", "devicePath": "/dev/b"}])],
        "containers": [C, container(name="d", resizePolicy=[{"resourceName": "memory", "restartPolicy": "RestartContainer"}],
                                    securityContext={"seLinuxOptions": {"level": "s0"}})],
    })  # fmt: skip
    assert unsupported_fields(mixed) == (
        ("spec.hostUsers", "spec.initContainers[0].volumeDevices", "spec.containers[1].securityContext.seLinuxOptions"),
        ("spec.containers[1].resizePolicy", "spec.topologySpreadConstraints"),
    )


def test_limits_and_a_disk_emptydirs_size_limit_are_applied_so_not_named():
    # Container limits go to the runtime and the pod cgroup; a sizeLimit is the eviction
    # manager's (localStorageCapacityIsolation).
    spec = {"containers": [container(resources={"limits": {"memory": "64Mi"}})],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}]}
    assert unsupported_fields(pod(spec)) == ((), ())
