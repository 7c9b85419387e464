"""Static pod manifests: bytes from a file or a URL -> defaulted, validated Pods with the
identity the Go kubelet gives a static pod (name suffix, content-hash UID, annotations).

Pure: the file and http source actors do the reading and call decode_manifests.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec
import yaml

from pykubelet.messages.pod import (
    Container,
    EmptyDirVolumeSource,
    HTTPGetAction,
    Pod,
    PodStatus,
    Probe,
    Toleration,
)
from pykubelet.messages.pod_updates import ManifestProblem

from pykubelet.messages import strict_yaml
from .validation import DNS1123_SUBDOMAIN_MAX, validate_pod

MAX_MANIFEST_BYTES = 1 << 20
"""Refused before parsing. (The Go kubelet reads at most 10 MiB; a Pod the API server
would store is under 1.5 MiB, and a manifest near 1 MiB is a mistake.)"""

CONFIG_HASH = "kubernetes.io/config.hash"
CONFIG_SOURCE = "kubernetes.io/config.source"
CONFIG_SEEN = "kubernetes.io/config.seen"
CONFIG_MIRROR = "kubernetes.io/config.mirror"
LOCAL_ANNOTATIONS = frozenset({CONFIG_SOURCE, CONFIG_MIRROR, CONFIG_SEEN})
"""Annotations the kubelet adds itself; a change to them is not a change to the pod."""

# What the Priority admission plugin gives the two built-in classes; others get 0.
SYSTEM_PRIORITIES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}

_STATIC_POD_TOLERATION = Toleration(operator="Exists", effect="NoExecute")
# A static pod exists without the API server, so it may not read API objects (Go: static
# pods may not reference ConfigMaps, Secrets or ServiceAccounts; NodeRestriction refuses
# such a mirror pod).
_STATIC_POD_VOLUME_TYPES = frozenset({"name", "hostPath", "emptyDir", "downwardAPI"})
_STATIC_POD_PROJECTIONS = frozenset({"downwardAPI"})


class ManifestError(ValueError):
    """A manifest that cannot become a pod; str() names the manifest and the field."""

    def __init__(self, origin: str, message: str) -> None:
        super().__init__(f"manifest {origin}: {message}")
        self.origin = origin
        self.message = message

    def problem(self, source: str) -> ManifestProblem:
        return ManifestProblem(source=source, origin=self.origin, message=self.message)


# --- decoding ------------------------------------------------------------------------


def _size(n: int) -> str:
    mib = f"{n / (1 << 20):.1f} MiB"
    return mib if mib != "1.0 MiB" else f"{n} bytes"


def check_manifest_size(size: int, *, origin: str) -> None:
    """Raise ManifestError for a manifest over MAX_MANIFEST_BYTES (sources check a
    file's size or a Content-Length before reading it)."""
    if size > MAX_MANIFEST_BYTES:
        raise ManifestError(origin, f"{_size(size)} is over the 1 MiB limit of a manifest")


def _parse(data: bytes, origin: str) -> Any:
    """The one document in data, as plain Python objects."""
    text = data.removeprefix(b"\xef\xbb\xbf")
    if text.lstrip().startswith(b"{"):
        try:
            return msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            return _parse_json_error(text, exc, origin)
        except UnicodeDecodeError as exc:  # msgspec's error for a string that is not UTF-8
            line = text.count(b"\n", 0, exc.start) + 1
            raise ManifestError(origin, f"not valid JSON at line {line}: not UTF-8 ({exc.reason})") from None
    try:
        documents = strict_yaml.load_all(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ManifestError(origin, f"not valid YAML{line}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ManifestError(origin, f"not valid YAML: {exc}") from None
    if len(documents) > 1:
        raise ManifestError(
            origin, f"holds {len(documents)} YAML documents; a static pod manifest holds one Pod"
        )
    return documents[0] if documents else None


def _parse_json_error(text: bytes, exc: msgspec.DecodeError, origin: str) -> Any:
    reason = str(exc).removeprefix("JSON is malformed: ")
    if match := re.search(r" \(byte (\d+)\)$", reason):
        reason = reason[: match.start()]
        line = text.count(b"\n", 0, int(match.group(1))) + 1
        raise ManifestError(origin, f"not valid JSON at line {line}: {reason}") from None
    raise ManifestError(origin, f"not valid JSON: {reason}") from None


def _drop_nulls(value: Any) -> Any:
    # A YAML key with no value ("args:") is null; Kubernetes reads null as "not set".
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _list(value: Any) -> list:
    # A field of the wrong type is left for msgspec.convert to name.
    return value if isinstance(value, list) else []


def _typed_pod(raw: dict, where: str, origin: str) -> Pod:
    spec = raw.get("spec") if isinstance(raw.get("spec"), dict) else {}
    for i, volume in enumerate(_list(spec.get("volumes"))):
        if not isinstance(volume, dict):
            continue
        if isinstance(volume.get("projected"), dict):
            for j, projection in enumerate(_list(volume["projected"].get("sources"))):
                if isinstance(projection, dict) and (refused := sorted(map(str, set(projection) - _STATIC_POD_PROJECTIONS))):
                    raise ManifestError(
                        origin,
                        f"{where}spec.volumes[{i}].projected.sources[{j}].{refused[0]}: a static pod may not "
                        "reference API objects (it must run without the API server); use hostPath or downwardAPI",
                    )
            volume = {k: v for k, v in volume.items() if k != "projected"}
        if unsupported := sorted(map(str, set(volume) - _STATIC_POD_VOLUME_TYPES)):
            raise ManifestError(
                origin,
                f"{where}spec.volumes[{i}].{unsupported[0]}: volume type not supported in a static pod "
                "(a static pod may use hostPath, emptyDir, downwardAPI and projected downwardAPI volumes)",
            )
    for kind in ("initContainers", "containers"):
        for i, container in enumerate(_list(spec.get(kind))):
            if not isinstance(container, dict):
                continue
            if container.get("envFrom"):
                raise ManifestError(
                    origin,
                    f"{where}spec.{kind}[{i}].envFrom: a static pod may not reference ConfigMaps or Secrets",
                )
            for j, env in enumerate(_list(container.get("env"))):
                source = env.get("valueFrom") if isinstance(env, dict) else None
                for ref in ("configMapKeyRef", "secretKeyRef"):
                    if isinstance(source, dict) and ref in source:
                        raise ManifestError(
                            origin,
                            f"{where}spec.{kind}[{i}].env[{j}].valueFrom.{ref}: a static pod may not "
                            "reference ConfigMaps or Secrets",
                        )
    try:
        return msgspec.convert(_drop_nulls(raw), Pod)
    except msgspec.ValidationError as exc:
        raise ManifestError(origin, _describe_conversion_error(str(exc), where)) from None


def _describe_conversion_error(error: str, where: str) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.spec.x`" -> "spec.x: expected int, got str"."""
    reason, _, at = error.partition(" - at `$")
    path = at.rstrip("`").removeprefix(".").replace("[...]", "")
    if missing := re.fullmatch(r"Object missing required field `(.+)`", reason):
        path = f"{path}.{missing.group(1)}" if path else missing.group(1)
        reason = "required"
    reason = reason.replace("`", "")
    reason = reason[:1].lower() + reason[1:]
    return f"{where}{path}: {reason}" if path else f"{where.rstrip('.') or 'manifest'}: {reason}"


def decode_manifests(data: bytes, *, origin: str, source: str, node_name: str) -> list[Pod]:
    """The pods in a manifest: one Pod for a file, a Pod or a PodList for a URL body.

    Every pod is defaulted as the API server would, validated, and given its static pod
    identity. Raises ManifestError naming origin (the path or URL) and the field.
    """
    if source not in ("file", "http"):
        raise ValueError(f"source must be 'file' or 'http', not {source!r}")
    check_manifest_size(len(data), origin=origin)
    document = _parse(data, origin)
    if document is None:
        raise ManifestError(origin, "empty (a static pod manifest holds one Pod)")
    if not isinstance(document, dict):
        raise ManifestError(origin, f"holds a YAML {type(document).__name__}, not a Pod object")
    kind = document.get("kind")
    accepted = "a Pod" if source == "file" else "a Pod or a PodList"
    if not kind:
        raise ManifestError(origin, 'kind: required ("kind: Pod")')
    if kind not in ("Pod", "PodList") or (kind == "PodList" and source == "file"):
        hint = "a static pod manifest holds one Pod" if source == "file" else "a manifest URL serves a Pod or a PodList"
        raise ManifestError(origin, f'kind "{kind}" is not {accepted} ({hint})')
    api_version = document.get("apiVersion")
    if not api_version:
        raise ManifestError(origin, 'apiVersion: required ("apiVersion: v1")')
    if api_version != "v1":
        raise ManifestError(origin, f'apiVersion "{api_version}" is not v1 (a {kind} is apiVersion v1)')
    if kind == "Pod":
        return [_static_pod(document, "", origin, source, node_name)]
    items = document.get("items") or []
    if not isinstance(items, list):
        raise ManifestError(origin, "items: expected a list of Pods")
    return [_static_pod(item, f"items[{i}].", origin, source, node_name) for i, item in enumerate(items)]


def _static_pod(raw: Any, where: str, origin: str, source: str, node_name: str) -> Pod:
    if not isinstance(raw, dict):
        raise ManifestError(origin, f"{where.rstrip('.')}: expected a Pod object")
    pod = _typed_pod(raw, where, origin)
    if not pod.metadata.name:
        raise ManifestError(origin, f"{where}metadata.name: required")
    pod = apply_api_defaults(pod)
    errors = validate_pod(pod)
    suffixed = static_pod_name(pod.metadata.name, node_name)
    if not errors and len(suffixed) > DNS1123_SUBDOMAIN_MAX:
        errors.append(
            f'metadata.name: "{suffixed}" (with the node name appended) is longer than '
            f"{DNS1123_SUBDOMAIN_MAX} characters"
        )
    if errors:
        raise ManifestError(origin, "; ".join(where + error for error in errors))
    return static_pod_identity(pod, origin=origin, source=source, node_name=node_name)


# --- defaults ------------------------------------------------------------------------


def default_image_pull_policy(image: str) -> str:
    """Always for ":latest" or no tag, IfNotPresent for any other tag or a digest."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _default_http_get(action: HTTPGetAction | None) -> HTTPGetAction | None:
    if action is None:
        return None
    return msgspec.structs.replace(action, path=action.path or "/", scheme=action.scheme or "HTTP")


def _default_probe(probe: Probe | None) -> Probe | None:
    if probe is None:
        return None
    return msgspec.structs.replace(
        probe,
        http_get=_default_http_get(probe.http_get),
        timeout_seconds=probe.timeout_seconds or 1,
        period_seconds=probe.period_seconds or 10,
        success_threshold=probe.success_threshold or 1,
        failure_threshold=probe.failure_threshold or 3,
    )


def _default_container(c: Container, *, host_network: bool) -> Container:
    lifecycle = c.lifecycle
    if lifecycle is not None:
        handlers = {
            name: msgspec.structs.replace(h, http_get=_default_http_get(h.http_get))
            for name in ("post_start", "pre_stop")
            if (h := getattr(lifecycle, name)) is not None
        }
        lifecycle = msgspec.structs.replace(lifecycle, **handlers)
    resources = c.resources
    if resources is not None and resources.limits:
        resources = msgspec.structs.replace(resources, requests={**resources.limits, **resources.requests})
    ports = [
        msgspec.structs.replace(
            p,
            protocol=p.protocol or "TCP",
            host_port=p.container_port if host_network and not p.host_port else p.host_port,
        )
        for p in c.ports
    ]
    return msgspec.structs.replace(
        c,
        image_pull_policy=c.image_pull_policy or default_image_pull_policy(c.image),
        termination_message_path=c.termination_message_path or "/dev/termination-log",
        termination_message_policy=c.termination_message_policy or "File",
        ports=ports,
        resources=resources,
        lifecycle=lifecycle,
        liveness_probe=_default_probe(c.liveness_probe),
        readiness_probe=_default_probe(c.readiness_probe),
        startup_probe=_default_probe(c.startup_probe),
    )


def apply_api_defaults(pod: Pod) -> Pod:
    """The defaults the API server fills in (pkg/apis/core/v1/defaults.go, plus the
    priority the Priority admission plugin sets)."""
    spec = pod.spec
    host_network = spec.host_network
    volumes = [v if v.type else msgspec.structs.replace(v, empty_dir=EmptyDirVolumeSource()) for v in spec.volumes]
    spec = msgspec.structs.replace(
        spec,
        containers=[_default_container(c, host_network=host_network) for c in spec.containers],
        init_containers=[_default_container(c, host_network=host_network) for c in spec.init_containers],
        restart_policy=spec.restart_policy or "Always",
        termination_grace_period_seconds=(
            30 if spec.termination_grace_period_seconds is None else spec.termination_grace_period_seconds
        ),
        dns_policy=spec.dns_policy or "ClusterFirst",
        scheduler_name=spec.scheduler_name or "default-scheduler",
        enable_service_links=True if spec.enable_service_links is None else spec.enable_service_links,
        priority=(
            SYSTEM_PRIORITIES.get(spec.priority_class_name, 0) if spec.priority is None else spec.priority
        ),
        volumes=volumes,
    )
    return msgspec.structs.replace(pod, spec=spec)


# --- static pod identity -------------------------------------------------------------


def static_pod_name(name: str, node_name: str) -> str:
    """Unique among nodes: the manifest's name with the (lowercased) node name appended."""
    return f"{name}-{node_name.lower()}"


def static_pod_uid(pod: Pod, *, origin: str, source: str, node_name: str) -> str:
    """Hex MD5 of the defaulted pod as decoded, then where it came from, in the order the
    Go kubelet's applyDefaults feeds its hasher: the pod, then "host:<node>" and
    "file:<path>" for a file, or "url:<url>" for a URL. A change to the manifest's
    content, its path or the node gives a new UID."""
    hasher = hashlib.md5(msgspec.json.encode(pod, order="deterministic"))
    if source == "file":
        hasher.update(f"host:{node_name}".encode())
        hasher.update(f"file:{origin}".encode())
    else:
        hasher.update(f"url:{origin}".encode())
    return hasher.hexdigest()


def _add_or_update_toleration(tolerations: list[Toleration], toleration: Toleration) -> list[Toleration]:
    """Go's AddOrUpdateTolerationInPod: replace the ones matching key, operator, value and
    effect; append when none does."""

    def matches(t: Toleration) -> bool:
        return (t.key, t.operator, t.value, t.effect) == (
            toleration.key,
            toleration.operator,
            toleration.value,
            toleration.effect,
        )

    if not any(matches(t) for t in tolerations):
        return [*tolerations, toleration]
    return [toleration if matches(t) else t for t in tolerations]


def static_pod_identity(pod: Pod, *, origin: str, source: str, node_name: str) -> Pod:
    """Go's applyDefaults for a pod from a file or URL: UID (kept if the manifest sets
    one), name suffix, default namespace, spec.nodeName, config.hash and config.source
    annotations, a toleration of every NoExecute taint for a file's pod, phase Pending.

    config.seen is not set here: pod config stamps it when it first sees the UID.
    """
    meta = pod.metadata
    uid = meta.uid or static_pod_uid(pod, origin=origin, source=source, node_name=node_name)
    metadata = msgspec.structs.replace(
        meta,
        uid=uid,
        name=static_pod_name(meta.name, node_name),
        namespace=meta.namespace or "default",
        annotations={**meta.annotations, CONFIG_HASH: uid, CONFIG_SOURCE: source},
    )
    tolerations = pod.spec.tolerations
    if source == "file":
        tolerations = _add_or_update_toleration(tolerations, _STATIC_POD_TOLERATION)
    spec = msgspec.structs.replace(pod.spec, node_name=node_name, tolerations=tolerations)
    return msgspec.structs.replace(pod, metadata=metadata, spec=spec, status=PodStatus(phase="Pending"))


# --- one pod per full name -----------------------------------------------------------


def drop_duplicate_pods(
    pods: list[tuple[str, Pod]], *, source: str
) -> tuple[list[Pod], list[ManifestProblem]]:
    """Keep the first pod of each namespace/name, as pod config's filterInvalidPods does,
    and a problem for each later one. `pods` pairs each pod with its origin, in order."""
    first: dict[str, str] = {}
    kept: list[Pod] = []
    problems: list[ManifestProblem] = []
    for origin, pod in pods:
        name = pod.full_name
        if name in first:
            where = "earlier in the same manifest" if first[name] == origin else f"by {first[name]}"
            problems.append(
                ManifestProblem(
                    source=source,
                    origin=origin,
                    message=f'pod "{name}" is already defined {where}; this one is ignored',
                )
            )
            continue
        first[name] = origin
        kept.append(pod)
    return kept, problems
