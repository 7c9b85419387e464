"""Admission as the Go kubelet's predicate admit handler: the pod's OS, then pykubelet's
unsupported fields, pods, cpu and memory against allocatable (in that order, first failure
wins), nodeSelector and required node affinity against the node's labels, spec.nodeName."""

from __future__ import annotations

import msgspec
import pytest

from pykubelet.messages.pod import Pod
from pykubelet.pods.admission import NODE_AFFINITY_MESSAGE, admit, node_allocatable, pod_requests, resize_pending

NODE = "node-a"
LABELS = {"kubernetes.io/hostname": "node-a", "kubernetes.io/os": "linux", "disk": "ssd", "cores": "8"}
ALLOCATABLE = {"cpu": 2000, "memory": 4 * 2**30, "pods": 3}


def pod(spec: dict | None = None, name: str = "web") -> Pod:
    return msgspec.convert({"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
                            "spec": {"containers": [{"name": "c", "image": "busybox"}], **(spec or {})}},
                           Pod)  # fmt: skip


def requesting(cpu: str | None = None, memory: str | None = None, name: str = "web") -> Pod:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return pod({"containers": [{"name": "c", "resources": {"requests": requests}}]}, name)


def required(*terms: dict) -> dict:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}  # fmt: skip


def expr(key: str, operator: str, *values: str) -> dict:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


def check(candidate: Pod, running: list[Pod] = (), **overrides):
    kwargs = {"node_name": NODE, "node_labels": LABELS, "allocatable": ALLOCATABLE, "running_pods": list(running)}
    return tuple(admit(candidate, **{**kwargs, **overrides}))


def test_a_pod_that_fits_is_admitted():
    assert check(pod()) == (True, "", "")


@pytest.mark.parametrize(
    "candidate, running, expected",
    [
        (pod(), [pod(name=f"p{i}") for i in range(3)],
         ("OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3")),
        (requesting(cpu="500m"), [requesting(cpu="1.6", name="a")],
         ("OutOfcpu", "Node didn't have enough resource: cpu, requested: 500, used: 1600, capacity: 2000")),
        (requesting(memory="1Gi"), [requesting(memory="3500Mi", name="a")],
         ("OutOfmemory", "Node didn't have enough resource: memory, requested: 1073741824, used: 3670016000, "
                         "capacity: 4294967296")),
        # cpu is checked before memory, and resources before affinity
        (pod({"containers": [{"name": "c", "resources": {"requests": {"cpu": "3", "memory": "5Gi"}}}],
              "nodeSelector": {"disk": "hdd"}}), [],
         ("OutOfcpu", "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000")),
        # limits only: the request is the limit (API defaulting; Go defaults static pods too)
        (pod({"containers": [{"name": "c", "resources": {"limits": {"cpu": "3"}}}]}), [],
         ("OutOfcpu", "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000")),
        (requesting(cpu="1"), [requesting(cpu="1", name="a")], None),  # exactly full fits
    ],
    ids=["pods", "cpu", "memory", "cpu-first", "limits-only", "exactly-full"],
)
def test_resources_beyond_allocatable_are_rejected_with_gos_reason(candidate, running, expected):
    got = check(candidate, running)
    assert got == ((True, "", "") if expected is None else (False, *expected))


def test_a_resource_missing_from_allocatable_is_not_checked():
    assert check(requesting(cpu="64"), allocatable={"pods": 110})[0] is True


@pytest.mark.parametrize(
    "spec, fits",
    [
        ({"nodeSelector": {"disk": "ssd"}}, True),
        ({"nodeSelector": {"disk": "ssd", "kubernetes.io/os": "linux"}}, True),
        ({"nodeSelector": {"disk": "hdd"}}, False),
        ({"nodeSelector": {"gpu": "yes"}}, False),
        (required(expr("disk", "In", "hdd", "ssd")), True),
        (required(expr("disk", "In", "hdd")), False),
        (required(expr("disk", "In")), False),  # In needs values
        (required(expr("disk", "NotIn", "hdd")), True),
        (required(expr("disk", "NotIn", "ssd")), False),
        (required(expr("gpu", "NotIn", "yes")), True),  # absent label is not in
        (required(expr("disk", "Exists")), True),
        (required(expr("gpu", "Exists")), False),
        (required(expr("gpu", "DoesNotExist")), True),
        (required(expr("disk", "DoesNotExist")), False),
        (required(expr("disk", "Exists", "ssd")), False),  # Exists takes no values
        (required(expr("cores", "Gt", "4")), True),
        (required(expr("cores", "Gt", "8")), False),
        (required(expr("cores", "Lt", "16")), True),
        (required(expr("cores", "Lt", "8")), False),
        (required(expr("disk", "Gt", "1")), False),  # not an integer label
        (required(expr("gpu", "Lt", "1")), False),  # absent label
        (required(expr("cores", "Gt", "1", "2")), False),  # exactly one value
        (required(expr("cores", "Near", "8")), False),  # unknown operator
        (required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}), True),
        (required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}), False),
        (required({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-b"]}]}), True),
        (required({"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}), False),
        # terms are ORed, requirements within a term ANDed; an empty term matches nothing
        (required(expr("disk", "In", "hdd"), expr("cores", "Gt", "2")), True),
        (required({"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]},
                                        {"key": "gpu", "operator": "Exists"}]}), False),  # fmt: skip
        (required({"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}],
                   "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}), False),  # fmt: skip
        (required({}), False),
        (required(), False),
        ({"affinity": {"nodeAffinity": {}}}, True),  # only preferred terms: nothing required
        # nodeSelector and affinity must both match
        ({"nodeSelector": {"disk": "hdd"}, **required(expr("disk", "Exists"))}, False),
    ],
)
def test_node_selector_and_required_node_affinity_match_the_node_labels(spec, fits):
    expected = (True, "", "") if fits else (False, "NodeAffinity", NODE_AFFINITY_MESSAGE)
    assert check(pod(spec)) == expected


def test_preferred_terms_are_decoded_away_and_do_not_matter():
    candidate = pod({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": expr("gpu", "Exists")}]}}})  # fmt: skip
    assert check(candidate) == (True, "", "")


def test_a_pod_bound_to_another_node_is_rejected():
    assert check(pod({"nodeName": "node-b"})) == (
        False, "NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name")


def containers(*specs: tuple[str, str | None, str | None]) -> list[dict]:
    out = []
    for name, cpu, restart in specs:
        container = {"name": name, "resources": {"requests": {"cpu": cpu}} if cpu else {}}
        if restart:
            container["restartPolicy"] = restart
        out.append(container)
    return out


@pytest.mark.parametrize(
    "app, init, cpu",
    [
        ([("a", "100m", None), ("b", "250m", None)], [], 350),
        ([("a", "100m", None)], [("i", "500m", None)], 500),  # max of init and app
        ([("a", "300m", None), ("b", "300m", None)], [("i", "500m", None)], 600),
        ([("a", "100m", None)], [("i1", "200m", None), ("i2", "400m", None)], 400),  # inits run one at a time
        # a sidecar runs beside the app containers and beside the init containers after it
        ([("a", "100m", None)], [("s", "200m", "Always")], 300),
        ([("a", "100m", None)], [("s", "200m", "Always"), ("i", "500m", None)], 700),
        ([("a", "100m", None)], [("i", "500m", None), ("s", "200m", "Always")], 500),
        ([("a", "0.1", None)], [], 100),
        ([("a", "1m", None), ("b", None, None)], [], 1),
    ],
)
def test_pod_requests_take_the_max_of_init_and_app_containers_as_go(app, init, cpu):
    candidate = pod({"containers": containers(*app), "initContainers": containers(*init)})
    assert pod_requests(candidate).get("cpu", 0) == cpu


def test_init_container_requests_count_in_admission():
    candidate = pod({"containers": containers(("a", "100m", None)),
                     "initContainers": containers(("i", "1500m", None))})  # fmt: skip
    assert check(candidate, [requesting(cpu="1", name="x")]) == (
        False, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000")


def test_node_allocatable_converts_the_nodes_quantities():
    assert node_allocatable({"cpu": "3500m", "memory": "8Gi", "pods": "110", "ephemeral-storage": "10Gi"}) == {
        "cpu": 3500, "memory": 8 * 2**30, "pods": 110}
    assert node_allocatable({"cpu": "4", "memory": "1000k"}) == {"cpu": 4000, "memory": 1_000_000}


# --- the pod's OS and the fields pykubelet does not implement ---------------------------


def test_a_pod_setting_unimplemented_fields_is_rejected_naming_each_and_the_way_out():
    candidate = pod({"hostUsers": False, "containers": [
        {"name": "c", "image": "busybox", "volumeDevices": [{"name": "b", "devicePath": "/dev/b"}]}]})
    assert check(candidate) == (
        False, "UnsupportedPodSpec",
        "pykubelet does not implement spec.hostUsers, spec.containers[0].volumeDevices; "
        "remove them or run the pod on another node")  # fmt: skip
    assert check(pod({"runtimeClassName": "kata"}))[2] == (
        "pykubelet does not implement spec.runtimeClassName; remove it or run the pod on another node")


def test_unimplemented_fields_are_reported_before_resources_that_do_not_fit():
    candidate = pod({"hostUsers": False,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "64"}}}]})  # fmt: skip
    assert check(candidate)[:2] == (False, "UnsupportedPodSpec")


def test_fields_the_kubelet_ignores_do_not_reject():
    candidate = pod({"topologySpreadConstraints": [
                         {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}],
                     "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                         {"topologyKey": "kubernetes.io/hostname"}]}}})  # fmt: skip
    assert check(candidate) == (True, "", "")


@pytest.mark.parametrize(
    "candidate, expected",
    [
        (pod({"os": {"name": "windows"}}),
         ("PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS")),
        (msgspec.structs.replace(pod(), metadata=msgspec.structs.replace(
            pod().metadata, labels={"kubernetes.io/os": "windows"})),
         ("PodOSSelectorNodeLabelDoesNotMatch",
          "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label")),
        (pod({"os": {"name": "linux"}}), None),
    ],
    ids=["os-field", "os-label", "linux"],
)  # fmt: skip
def test_a_pod_for_another_os_is_rejected_with_gos_reasons(candidate, expected):
    assert check(candidate) == ((True, "", "") if expected is None else (False, *expected))


def _sized(uid: str, cpu: str) -> Pod:
    candidate = pod({"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]})
    candidate.metadata.uid = uid
    return candidate


@pytest.mark.parametrize("cpu, others, expected", [
    ("500m", ["1"], None),  # fits beside the others
    ("3", [], ("Infeasible", "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000")),
    ("1500m", ["1"], ("Deferred", "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000")),
])  # fmt: skip
def test_a_resize_that_does_not_fit_is_pending_as_go_says_why(cpu, others, expected):
    resized = _sized("me", cpu)
    running = [resized, *(_sized(f"o{i}", c) for i, c in enumerate(others))]
    condition = resize_pending(resized, allocatable={"cpu": 2000, "memory": 4 * 2**30}, running_pods=running)
    assert (None if condition is None else (condition.reason, condition.message)) == expected
    assert condition is None or (condition.type, condition.status) == ("PodResizePending", "True")
