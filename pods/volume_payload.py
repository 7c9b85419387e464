"""What files a configMap, secret, downwardAPI or projected volume holds: Go's MakePayload
(configmap, secret), downwardapi.CollectData and projected collectData, as pure functions.
The volume manager builds each such volume's payload here and hands it to
ports/atomic_writer.py, on mount and on every refresh.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pykubelet.messages.pod import (
    ConfigMapProjection,
    ConfigMapVolumeSource,
    DownwardAPIVolumeFile,
    KeyToPath,
    Pod,
    ProjectedVolumeSource,
    SecretProjection,
    SecretVolumeSource,
)

from .downward_api import DownwardApiError, PodFacts, field_ref_value, resource_field_value

# Go: ConfigMapVolumeSourceDefaultMode, SecretVolumeSourceDefaultMode,
# DownwardAPIVolumeSourceDefaultMode and ProjectedVolumeSourceDefaultMode are all 0644.
DEFAULT_MODE = 0o644
# The volume types above are read-only, so SetVolumeOwnership ORs this (roMask) into
# every file's mode when the pod has an fsGroup, and chowns the file to that group.
_FS_GROUP_MASK = 0o440
# projected.go: a token file is 0600 when the pod has an fsUser or fsGroup (the fsGroup
# pass then makes it 0640); only without either does it take the volume's defaultMode.
_TOKEN_MODE_OWNED = 0o600


@dataclass(frozen=True)
class FileProjection:
    """One file of a volume: its bytes, its mode, and the owner to chown it to (None: keep)."""

    data: bytes
    mode: int
    uid: int | None = None
    gid: int | None = None


class VolumePayloadError(ValueError):
    """A volume's payload cannot be built; the message is Go's, for the FailedMount event."""


class VolumeObjects(Protocol):
    """The configMaps and secrets a pod's volumes read; None when the object does not exist."""

    def config_map(self, namespace: str, name: str) -> Mapping[str, str | bytes] | None:
        """data and binaryData merged."""
        ...

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        """data, base64-decoded."""
        ...


def config_map_payload(
    source: ConfigMapVolumeSource | ConfigMapProjection,
    namespace: str,
    objects: VolumeObjects,
    *,
    default_mode: int | None = None,
    fs_group: int | None = None,
) -> dict[str, FileProjection]:
    """A configMap volume's (or projection's) files. default_mode None: the volume source's
    own defaultMode, else 0644. Raises VolumePayloadError as Go's SetUp fails."""
    optional = bool(source.optional)
    data = objects.config_map(namespace, source.name)
    if data is None:
        if not optional:
            # The kubelet's configMap manager names the resource in the singular.
            raise VolumePayloadError(f'configmap "{source.name}" not found')
        data = {}
    mode = _default_mode(source, default_mode)
    files = _make_payload(source.items, data, mode, optional, "configmap references non-existent config key")
    return _owned(files, fs_group)


def secret_payload(
    source: SecretVolumeSource | SecretProjection,
    namespace: str,
    objects: VolumeObjects,
    *,
    default_mode: int | None = None,
    fs_group: int | None = None,
) -> dict[str, FileProjection]:
    """A secret volume's (or projection's) files; as config_map_payload."""
    name = source.secret_name if isinstance(source, SecretVolumeSource) else source.name
    optional = bool(source.optional)
    data = objects.secret(namespace, name)
    if data is None:
        if not optional:
            raise VolumePayloadError(f'secret "{name}" not found')
        data = {}
    mode = _default_mode(source, default_mode)
    files = _make_payload(source.items, data, mode, optional, "references non-existent secret key")
    return _owned(files, fs_group)


def downward_api_payload(
    items: Sequence[DownwardAPIVolumeFile],
    pod: Pod,
    facts: PodFacts,
    *,
    default_mode: int | None = None,
    fs_group: int | None = None,
) -> dict[str, FileProjection]:
    """A downwardAPI volume's files (Go's CollectData): every item is tried and the errors
    are reported together; an item with neither fieldRef nor resourceFieldRef is empty."""
    mode_default = DEFAULT_MODE if default_mode is None else default_mode
    files: dict[str, FileProjection] = {}
    errors: list[str] = []
    for item in items:
        data = b""
        try:
            if item.field_ref is not None:
                data = field_ref_value(pod, item.field_ref.field_path, facts).encode()
            elif item.resource_field_ref is not None:
                ref = item.resource_field_ref
                value = resource_field_value(pod, ref.container_name, ref.resource, ref.divisor, facts)
                data = value.encode()
        except DownwardApiError as e:
            errors.append(str(e))
        mode = mode_default if item.mode is None else item.mode
        files[posixpath.normpath(item.path)] = FileProjection(data, mode)
    if errors:
        raise VolumePayloadError(_aggregate(errors))
    return _owned(files, fs_group)


def projected_payload(
    volume: ProjectedVolumeSource,
    pod: Pod,
    facts: PodFacts,
    objects: VolumeObjects,
    tokens: Mapping[int, bytes],
    *,
    fs_group: int | None = None,
) -> dict[str, FileProjection]:
    """A projected volume's files: every source's, later sources winning a shared path.
    tokens maps the index of each serviceAccountToken source in volume.sources to the
    token the caller fetched through TokenRequest. As Go, every source is tried and the
    errors are reported together. A token file is 0600 owned by the pod's fsUser
    (fs_user_from) when the pod has an fsUser or fsGroup, else the volume's defaultMode."""
    mode = DEFAULT_MODE if volume.default_mode is None else volume.default_mode
    namespace = pod.metadata.namespace
    fs_user = fs_user_from(pod)
    modes = {"default_mode": mode, "fs_group": fs_group}
    files: dict[str, FileProjection] = {}
    errors: list[str] = []
    for index, source in enumerate(volume.sources):
        try:
            if source.secret is not None:
                files |= secret_payload(source.secret, namespace, objects, **modes)
            elif source.config_map is not None:
                files |= config_map_payload(source.config_map, namespace, objects, **modes)
            elif source.downward_api is not None:
                files |= downward_api_payload(source.downward_api.items, pod, facts, **modes)
            elif source.service_account_token is not None:
                token_path = source.service_account_token.path
                if index not in tokens:
                    raise VolumePayloadError(f"serviceAccountToken {token_path!r}: no token was requested")
                owned = fs_user is not None or fs_group is not None
                token = FileProjection(tokens[index], _TOKEN_MODE_OWNED if owned else mode, uid=fs_user)
                files |= _owned({token_path: token}, fs_group)
            elif source.cluster_trust_bundle is not None or source.pod_certificate is not None:
                kind = "clusterTrustBundle" if source.cluster_trust_bundle is not None else "podCertificate"
                raise VolumePayloadError(f"projected source {kind} is not supported by pykubelet")
        except VolumePayloadError as e:
            errors.append(str(e))
    if errors:
        raise VolumePayloadError(_aggregate(errors))
    return files


def fs_user_from(pod: Pod) -> int | None:
    """Go's FsUserFrom: the runAsUser every container runs as, None unless all agree."""
    fs_user: int | None = None
    pod_context = pod.spec.security_context
    for container in [*pod.spec.init_containers, *pod.spec.containers]:
        uid = container.security_context.run_as_user if container.security_context else None
        if uid is None and pod_context is not None:
            uid = pod_context.run_as_user
        if uid is None or (fs_user is not None and fs_user != uid):
            return None
        fs_user = uid
    return fs_user


# --- helpers -------------------------------------------------------------------------


def _default_mode(source: object, default_mode: int | None) -> int:
    if default_mode is not None:
        return default_mode
    own = getattr(source, "default_mode", None)  # only the volume sources carry one
    return DEFAULT_MODE if own is None else own


def _make_payload(
    items: Sequence[KeyToPath], data: Mapping[str, str | bytes], mode: int, optional: bool, missing: str
) -> dict[str, FileProjection]:
    """Go's MakePayload: every key when there are no items, else the items' keys; a key
    the object lacks is an error unless the volume is optional, which skips it."""
    if not items:
        return {key: FileProjection(_bytes(value), mode) for key, value in data.items()}
    files: dict[str, FileProjection] = {}
    for item in items:
        if item.key not in data:
            if optional:
                continue
            raise VolumePayloadError(f"{missing}: {item.key}")
        files[item.path] = FileProjection(_bytes(data[item.key]), mode if item.mode is None else item.mode)
    return files


def _owned(files: dict[str, FileProjection], fs_group: int | None) -> dict[str, FileProjection]:
    """SetVolumeOwnership's effect on the files of a read-only volume: group fsGroup,
    readable by owner and group whatever the mode asked."""
    if fs_group is None:
        return files
    return {
        path: FileProjection(f.data, f.mode | _FS_GROUP_MASK, f.uid, fs_group) for path, f in files.items()
    }


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _aggregate(messages: list[str]) -> str:
    """utilerrors.NewAggregate's wording: one error as itself, several as [a, b], repeats once."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
