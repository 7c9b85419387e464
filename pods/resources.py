"""Resource quantities ("100m", "1.5Gi") and a pod's QoS class (Go: resource.Quantity,
GetPodQOS). Pure; status, admission, the downward API and the volume manager read them."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from pykubelet.messages.pod import Pod, ResourceRequirements

_SUFFIXES = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}


_QOS_RESOURCES = frozenset({"cpu", "memory"})


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes resource quantity ("100m", "1.5Gi", "2e3") as a number."""
    text = text.strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            number, scale = text[: -len(suffix)], _SUFFIXES[suffix]
            break
    else:
        number, scale = text, Decimal(1)
    try:
        return Decimal(number) * scale
    except InvalidOperation:
        raise ValueError(f"invalid resource quantity {text!r}") from None


def qos_class(pod: Pod) -> str:
    """Go's GetPodQOS: Guaranteed when every container has cpu and memory limits equal to
    its requests, BestEffort when nothing is requested or limited, else Burstable.
    Only cpu and memory count; a missing request defaults to its limit, as the API
    server's defaulting does."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for container in list(pod.spec.containers) + list(pod.spec.init_containers):
        resources = container.resources or ResourceRequirements()
        container_limits = {k: v for k, v in resources.limits.items() if k in _QOS_RESOURCES}
        container_requests = {k: v for k, v in resources.requests.items() if k in _QOS_RESOURCES}
        for name, value in container_limits.items():
            container_requests.setdefault(name, value)
        for name, value in container_requests.items():
            quantity = parse_quantity(value)
            if quantity > 0:
                requests[name] = requests.get(name, Decimal(0)) + quantity
        found = set()
        for name, value in container_limits.items():
            quantity = parse_quantity(value)
            if quantity > 0:
                found.add(name)
                limits[name] = limits.get(name, Decimal(0)) + quantity
        if found != _QOS_RESOURCES:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests == limits:
        return "Guaranteed"
    return "Burstable"
