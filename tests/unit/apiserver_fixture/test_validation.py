"""Every written object is checked against the official v1.36 schemas and the Go-side
rules a kubelet can trip over, and gets the API server's defaults on create."""

from __future__ import annotations

from tests.support.apiserver import objects

PODS = "/api/v1/namespaces/default/pods"


def test_pod_without_an_image_is_422_invalid_naming_the_field(apiserver):
    pod = objects.pod("web", "node1")
    del pod["spec"]["containers"][0]["image"]
    response = apiserver.admin.post(PODS, json=pod)
    assert response.status_code == 422
    body = response.json()
    assert body["reason"] == "Invalid"
    assert body["message"] == 'Pod "web" is invalid: spec.containers[0].image: Required value'
    assert body["details"]["causes"] == [{"reason": "FieldValueRequired", "message": "Required value",
                                          "field": "spec.containers[0].image"}]


def test_schema_errors_are_422_with_the_schemas_message(apiserver):
    pod = objects.pod("web", "node1")
    pod["spec"]["containers"][0]["ports"] = [{"name": "http"}]  # containerPort is required by the schema
    response = apiserver.admin.post(PODS, json=pod)
    assert response.status_code == 422
    assert response.json()["details"]["causes"][0]["field"] == "spec.containers[0].ports[0].containerPort"


def test_invalid_names_and_enums_are_422(apiserver):
    bad_name = objects.pod("Web_1", "node1")
    assert apiserver.admin.post(PODS, json=bad_name).status_code == 422
    bad_policy = objects.pod("web", "node1", restartPolicy="Sometimes")
    response = apiserver.admin.post(PODS, json=bad_policy)
    assert response.status_code == 422
    assert 'Unsupported value: "Sometimes"' in response.json()["message"]


def test_wrong_json_types_and_unknown_fields_are_400_bad_request(apiserver):
    wrong_type = objects.pod("web", "node1")
    wrong_type["spec"]["containers"][0]["ports"] = [{"containerPort": "80"}]
    response = apiserver.admin.post(PODS, json=wrong_type)
    assert response.status_code == 400 and "cannot unmarshal string" in response.json()["message"]
    unknown = objects.pod("web", "node1")
    unknown["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    response = apiserver.admin.post(PODS, json=unknown)
    assert response.status_code == 400
    assert response.json()["message"] == 'strict decoding error: unknown field "spec.containers[0].imagePullPolicyy"'


def test_unknown_fields_are_dropped_with_a_warning_when_asked(apiserver):
    unknown = objects.pod("web", "node1")
    unknown["spec"]["bogus"] = 1
    response = apiserver.admin.post(PODS, json=unknown, params={"fieldValidation": "Warn"})
    assert response.status_code == 201
    assert "bogus" not in response.json()["spec"]
    assert 'unknown field \\"spec.bogus\\"' in response.headers["warning"]


def test_pod_defaults_are_applied_on_create(apiserver):
    pod = objects.pod("web", "node1", image="example.com/app")
    pod["spec"]["containers"][0]["livenessProbe"] = {"httpGet": {"port": 8080}}
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "500m", "memory": "128Mi"}}
    created = apiserver.admin.post(PODS, json=pod).json()
    meta, spec, status = created["metadata"], created["spec"], created["status"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z") and meta["resourceVersion"]
    assert (spec["restartPolicy"], spec["terminationGracePeriodSeconds"], spec["dnsPolicy"], spec["schedulerName"]) == (
        "Always", 30, "ClusterFirst", "default-scheduler")
    container = spec["containers"][0]
    assert container["imagePullPolicy"] == "Always"  # no tag means :latest
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "128Mi"}
    assert container["livenessProbe"] == {"httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1,
                                          "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
    assert status == {"phase": "Pending", "qosClass": "Guaranteed"}
    tagged = apiserver.admin.post(PODS, json=objects.pod("tagged", "node1", image="busybox:1.36")).json()
    assert tagged["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert tagged["status"]["qosClass"] == "BestEffort"


def test_create_of_an_existing_pod_is_409_already_exists(apiserver):
    assert apiserver.admin.post(PODS, json=objects.pod("web", "node1")).status_code == 201
    again = apiserver.admin.post(PODS, json=objects.pod("web", "node1"))
    assert again.status_code == 409 and again.json()["reason"] == "AlreadyExists"
    assert again.json()["message"] == 'pods "web" already exists'


def test_pod_in_a_missing_namespace_is_404(apiserver):
    response = apiserver.admin.post("/api/v1/namespaces/nowhere/pods", json=objects.pod("web", "node1", namespace="nowhere"))
    assert response.status_code == 404 and response.json()["message"] == 'namespaces "nowhere" not found'


def test_pod_spec_updates_other_than_images_are_forbidden(apiserver):
    created = apiserver.admin.post(PODS, json=objects.pod("web", "node1")).json()
    created["spec"]["nodeName"] = "node2"
    response = apiserver.admin.put(f"{PODS}/web", json=created)
    assert response.status_code == 422 and "pod updates may not change fields" in response.json()["message"]


def test_status_may_not_leave_a_terminal_phase(apiserver):
    apiserver.admin.post(PODS, json=objects.pod("web", "node1"))
    node1 = apiserver.client("system:node:node1")
    merge = {"Content-Type": "application/merge-patch+json"}
    assert node1.patch(f"{PODS}/web/status", json={"status": {"phase": "Failed"}}, headers=merge).status_code == 200
    assert node1.patch(f"{PODS}/web/status", json={"status": {"phase": "Running"}}, headers=merge).status_code == 422


def test_node_create_keeps_status_and_defaults_allocatable(apiserver):
    created = apiserver.client("system:node:node1").post("/api/v1/nodes", json=objects.node("node1")).json()
    assert created["status"]["allocatable"] == created["status"]["capacity"]


def test_event_in_another_namespace_than_its_object_is_422(apiserver):
    event = objects.event("p.1", namespace="default", involved={"kind": "Pod", "namespace": "kube-system", "name": "p"})
    response = apiserver.client("system:node:node1").post("/api/v1/namespaces/default/events", json=event)
    assert response.status_code == 422 and "does not match event.namespace" in response.json()["message"]
