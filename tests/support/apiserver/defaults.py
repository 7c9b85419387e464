"""What kube-apiserver fills in on create: the v1 defaulting functions (SetDefaults_Pod,
_PodSpec, _Container, _Probe, _Volume, _NodeStatus, _Namespace) and the default admission
plugins that touch pods (Priority, DefaultTolerationSeconds, ServiceAccount's name only),
plus the pod strategy's initial status (phase Pending, qosClass)."""

from __future__ import annotations

from typing import Any

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
SYSTEM_PRIORITIES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
_DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_VOLUME_SOURCES_WITH_MODE = ("secret", "configMap", "downwardAPI", "projected")


def image_tag(image: str) -> str:
    """The tag docker's reference parser finds ("latest" when there is neither tag nor digest)."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        return last.rsplit(":", 1)[1]
    return "" if digest else "latest"


def _default_probe(probe: dict[str, Any] | None) -> None:
    if not isinstance(probe, dict):
        return
    probe.setdefault("timeoutSeconds", 1)
    probe.setdefault("periodSeconds", 10)
    probe.setdefault("successThreshold", 1)
    probe.setdefault("failureThreshold", 3)
    _default_handler(probe)


def _default_handler(handler: dict[str, Any] | None) -> None:
    if not isinstance(handler, dict):
        return
    http = handler.get("httpGet")
    if isinstance(http, dict):
        if not http.get("path"):
            http["path"] = "/"
        http.setdefault("scheme", "HTTP")


def _default_env(env: list[Any] | None) -> None:
    for var in env or ():
        ref = (var.get("valueFrom") or {}).get("fieldRef") if isinstance(var, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def default_container(container: dict[str, Any], host_network: bool) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    if not container.get("imagePullPolicy"):
        container["imagePullPolicy"] = "Always" if image_tag(container.get("image", "")) == "latest" else "IfNotPresent"
    for port in container.get("ports") or ():
        port.setdefault("protocol", "TCP")
        if host_network and "hostPort" not in port and "containerPort" in port:
            port["hostPort"] = port["containerPort"]
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(container.get(kind))
    lifecycle = container.get("lifecycle") or {}
    for hook in ("postStart", "preStop"):
        _default_handler(lifecycle.get(hook))
    _default_env(container.get("env"))
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)


def default_volume(volume: dict[str, Any]) -> None:
    sources = [k for k in volume if k != "name"]
    if not sources:
        volume["emptyDir"] = {}
    if isinstance(volume.get("hostPath"), dict):
        volume["hostPath"].setdefault("type", "")
    for kind in _VOLUME_SOURCES_WITH_MODE:
        source = volume.get(kind)
        if isinstance(source, dict):
            source.setdefault("defaultMode", 420)
            for item in source.get("items") or ():
                if isinstance(item, dict) and isinstance(item.get("fieldRef"), dict):
                    item["fieldRef"].setdefault("apiVersion", "v1")


def default_pod(pod: dict[str, Any]) -> None:
    meta = pod.setdefault("metadata", {})
    spec = pod.setdefault("spec", {})
    mirror = MIRROR_ANNOTATION in (meta.get("annotations") or {})
    host_network = bool(spec.get("hostNetwork"))
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(kind) or ():
            if isinstance(container, dict):
                default_container(container, host_network)
    for volume in spec.get("volumes") or ():
        if isinstance(volume, dict):
            default_volume(volume)
    # Priority admission
    if "priority" not in spec:
        spec["priority"] = SYSTEM_PRIORITIES.get(spec.get("priorityClassName", ""), 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    # DefaultTolerationSeconds admission
    tolerations = spec.setdefault("tolerations", [])
    for key in _DEFAULT_TOLERATIONS:
        if not any(_tolerates(t, key) for t in tolerations if isinstance(t, dict)):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    # ServiceAccount admission (the name only; no token volume is injected, see README)
    if not mirror:
        spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    if spec.get("serviceAccountName"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def _tolerates(toleration: dict[str, Any], key: str) -> bool:
    effect_ok = toleration.get("effect") in (None, "", "NoExecute")
    if toleration.get("operator") == "Exists" and not toleration.get("key"):
        return effect_ok
    return toleration.get("key") == key and effect_ok


def qos_class(spec: dict[str, Any]) -> str:
    requests: dict[str, set[str]] = {"cpu": set(), "memory": set()}
    containers = [c for kind in ("initContainers", "containers") for c in (spec.get(kind) or ()) if isinstance(c, dict)]
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        req = {k: v for k, v in (resources.get("requests") or {}).items() if k in requests}
        lim = {k: v for k, v in (resources.get("limits") or {}).items() if k in requests}
        if req or lim:
            any_set = True
        if set(lim) != {"cpu", "memory"} or any(req.get(k, lim[k]) != lim[k] for k in lim):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def default_node(node: dict[str, Any]) -> None:
    node.setdefault("spec", {})
    status = node.setdefault("status", {})
    if "allocatable" not in status and "capacity" in status:
        status["allocatable"] = dict(status["capacity"])


def default_namespace(namespace: dict[str, Any]) -> None:
    meta = namespace.setdefault("metadata", {})
    meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
    namespace.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    namespace["status"] = {"phase": "Active"}


def default_lease(lease: dict[str, Any]) -> None:
    lease.setdefault("spec", {})


def default_secret(secret: dict[str, Any]) -> None:
    secret.setdefault("type", "Opaque")


def default_service(service: dict[str, Any]) -> None:
    """SetDefaults_Service and the service strategy's PrepareForCreate; cluster IPs and node
    ports are allocated later (cluster.allocate_service), as the service REST does."""
    spec = service.setdefault("spec", {})
    kind = spec.setdefault("type", "ClusterIP")
    if spec.setdefault("sessionAffinity", "None") == "ClientIP":
        spec.setdefault("sessionAffinityConfig", {}).setdefault("clientIP", {}).setdefault("timeoutSeconds", 10800)
    if kind != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if kind in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if kind == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    for port in spec.get("ports") or ():
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "targetPort" not in port and "port" in port:
                port["targetPort"] = port["port"]
    service["status"] = {"loadBalancer": {}}
