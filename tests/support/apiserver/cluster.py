"""What a real control plane does beyond storing objects, done synchronously here: the
objects a cluster starts with (the `kubernetes` Service in default; the `default`
ServiceAccount and the `kube-root-ca.crt` ConfigMap in every namespace, as the
serviceaccounts and root-ca-cert-publisher controllers make them), service cluster IP and
node port allocation, and the ServiceAccount admission check that a pod's account exists.
KubeApi (api.py) calls these."""

from __future__ import annotations

import copy
import ipaddress
import random
from typing import Any

from tests.support.apiserver import errors
from tests.support.apiserver.defaults import MIRROR_ANNOTATION

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/24")  # --service-cluster-ip-range (DESIGN.md)
KUBERNETES_SERVICE_IP = "10.96.0.1"  # the range's first address, the apiserver's own Service
NODE_PORTS = range(30000, 32768)
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
ROOT_CA_DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints "
                       "such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across "
                       "distributions of Kubernetes clusters.")
# ServiceIPStaticSubrange: dynamic allocation prefers the addresses above the static band.
_STATIC_BAND = min(max(16, SERVICE_CIDR.num_addresses // 16), 256)


def kubernetes_service(api_port: int) -> dict[str, Any]:
    """The Service kube-apiserver keeps for itself (its "kubernetes" endpoint reconciler)."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": KUBERNETES_SERVICE_IP,
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": api_port}]},
    }


def namespace_objects(namespace: str, ca_pem: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(resource, object) the namespace controllers create in every namespace."""
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}}
    root_ca = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": namespace,
                     "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
        "data": {"ca.crt": ca_pem.decode()},
    }
    return [("serviceaccounts", account), ("configmaps", root_ca)]


def admit_pod_service_account(pod: dict[str, Any], account_exists: bool) -> None:
    """ServiceAccount admission: a pod (not a mirror pod) is refused when its account is missing."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}) or not spec.get("serviceAccountName") or account_exists:
        return
    namespace, account = meta.get("namespace", ""), spec["serviceAccountName"]
    raise errors.forbidden("pods", "", meta.get("name") or None,
                           f'error looking up service account {namespace}/{account}: serviceaccount "{account}" not found')


def _allocation_error(obj: dict[str, Any], ip: str, why: str) -> errors.ApiError:
    return errors.invalid("Service", obj["metadata"].get("name", ""), "", [
        errors.invalid_value("spec.clusterIPs", [ip], f"failed to allocate IP {ip}: {why}")])


def allocate_service(obj: dict[str, Any], old: dict[str, Any] | None, services: list[dict[str, Any]]) -> None:
    """The service REST's allocators: a cluster IP from SERVICE_CIDR (kept across updates),
    the ipFamily fields, and node ports for NodePort and LoadBalancer Services."""
    spec = obj.setdefault("spec", {})
    old_spec = (old or {}).get("spec") or {}
    others = [s for s in services if s["metadata"].get("uid") != obj["metadata"].get("uid")]
    kind = spec.get("type", "ClusterIP")
    if kind == "ExternalName":
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            spec.pop(key, None)
        return
    if not spec.get("clusterIP") and old_spec.get("clusterIP"):
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if key in old_spec:
                spec[key] = copy.deepcopy(old_spec[key])
    ip = spec.get("clusterIP") or (spec.get("clusterIPs") or [""])[0]
    if ip == "None":
        spec["clusterIP"], spec["clusterIPs"] = "None", ["None"]
    elif ip and ip != old_spec.get("clusterIP"):
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            raise errors.invalid("Service", obj["metadata"].get("name", ""), "", [
                errors.invalid_value("spec.clusterIPs[0]", ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")]) from None
        if address not in SERVICE_CIDR or address in (SERVICE_CIDR.network_address, SERVICE_CIDR.broadcast_address):
            raise _allocation_error(obj, ip, f"the provided IP ({ip}) is not in the valid range. The range of valid IPs is {SERVICE_CIDR}")
        if any((s.get("spec") or {}).get("clusterIP") == ip for s in others):
            raise _allocation_error(obj, ip, "provided IP is already allocated")
        spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
    elif not ip:
        used = {(s.get("spec") or {}).get("clusterIP") for s in others}
        hosts = [str(a) for a in SERVICE_CIDR.hosts() if str(a) not in used]
        if not hosts:
            raise errors.ApiError(500, "Internal error occurred: failed to allocate a serviceIP: range is full")
        upper = [h for h in hosts if int(ipaddress.ip_address(h)) - int(SERVICE_CIDR.network_address) >= _STATIC_BAND]
        spec["clusterIP"] = random.choice(upper or hosts)
        spec["clusterIPs"] = [spec["clusterIP"]]
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    if kind in ("NodePort", "LoadBalancer"):
        used_ports = {p.get("nodePort") for s in others for p in (s.get("spec") or {}).get("ports") or ()}
        old_ports = {(p.get("port"), p.get("protocol")): p.get("nodePort") for p in old_spec.get("ports") or ()}
        for index, port in enumerate(spec.get("ports") or ()):
            if not port.get("nodePort"):
                kept = old_ports.get((port.get("port"), port.get("protocol")))
                port["nodePort"] = kept or random.choice([n for n in NODE_PORTS if n not in used_ports])
            elif port["nodePort"] not in NODE_PORTS:
                raise errors.invalid("Service", obj["metadata"].get("name", ""), "", [errors.invalid_value(
                    f"spec.ports[{index}].nodePort", port["nodePort"],
                    f"provided port is not in the valid range. The range of valid ports is {NODE_PORTS.start}-{NODE_PORTS.stop - 1}")])
            elif port["nodePort"] in used_ports:
                raise errors.invalid("Service", obj["metadata"].get("name", ""), "", [errors.invalid_value(
                    f"spec.ports[{index}].nodePort", port["nodePort"], "provided port is already allocated")])
            used_ports.add(port["nodePort"])
