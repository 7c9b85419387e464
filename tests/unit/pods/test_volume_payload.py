"""The files of configMap, secret, downwardAPI and projected volumes: Go's MakePayload,
CollectData and projected collectData, one row per behaviour."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from pykubelet.messages.pod import (
    ConfigMapProjection,
    ConfigMapVolumeSource,
    Container,
    DownwardAPIProjection,
    DownwardAPIVolumeFile,
    KeyToPath,
    ObjectFieldSelector,
    ObjectMeta,
    Pod,
    PodSecurityContext,
    PodSpec,
    ProjectedVolumeSource,
    ResourceFieldSelector,
    ResourceRequirements,
    SecretProjection,
    SecretVolumeSource,
    SecurityContext,
    ServiceAccountTokenProjection,
    VolumeProjection,
)
from pykubelet.pods.downward_api import PodFacts
from pykubelet.pods.volume_payload import (
    FileProjection,
    VolumePayloadError,
    config_map_payload,
    downward_api_payload,
    fs_user_from,
    projected_payload,
    secret_payload,
)

NS = "ns"
FACTS = PodFacts(node_name="node-1", host_ip="10.0.0.1", pod_ips=("10.1.0.5",), node_allocatable={"cpu": "4"})


class Objects:
    """The configMaps and secrets of namespace "ns"; anything else is not found."""

    def __init__(self, config_maps: Mapping[str, Mapping[str, str | bytes]] = {}, secrets: Mapping[str, Mapping[str, bytes]] = {}):
        self.config_maps = config_maps
        self.secrets = secrets

    def config_map(self, namespace: str, name: str) -> Mapping[str, str | bytes] | None:
        return self.config_maps.get(name) if namespace == NS else None

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        return self.secrets.get(name) if namespace == NS else None


OBJECTS = Objects(
    config_maps={"cfg": {"a": "alpha", "b": "beta", "bin": b"\x00\xff"}},
    secrets={"sec": {"user": b"admin", "pass": b"s3cret"}},
)


def make_pod(*, pod_uid: int | None = None, container_uids: tuple[int | None, ...] = (None,)) -> Pod:
    return Pod(
        metadata=ObjectMeta(name="web", namespace=NS, uid="u1", labels={"b": "2", "a": "1"}),
        spec=PodSpec(
            security_context=PodSecurityContext(run_as_user=pod_uid) if pod_uid is not None else None,
            containers=[
                Container(
                    name=f"c{i}",
                    resources=ResourceRequirements(limits={"memory": "64Mi"}),
                    security_context=SecurityContext(run_as_user=uid) if uid is not None else None,
                )
                for i, uid in enumerate(container_uids)
            ],
        ),
    )


def ktp(key: str, path: str, mode: int | None = None) -> KeyToPath:
    return KeyToPath(key=key, path=path, mode=mode)


# --- configMap ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, default_mode, expected",
    [
        pytest.param(
            ConfigMapVolumeSource(name="cfg"), None,
            {"a": FileProjection(b"alpha", 0o644), "b": FileProjection(b"beta", 0o644),
             "bin": FileProjection(b"\x00\xff", 0o644)},
            id="no items: every key, data and binaryData, mode 0644",
        ),
        pytest.param(
            ConfigMapVolumeSource(name="cfg", default_mode=0o400), None,
            {"a": FileProjection(b"alpha", 0o400), "b": FileProjection(b"beta", 0o400),
             "bin": FileProjection(b"\x00\xff", 0o400)},
            id="the volume's defaultMode",
        ),
        pytest.param(
            ConfigMapVolumeSource(name="cfg", default_mode=0o400), 0o440,
            {"a": FileProjection(b"alpha", 0o440), "b": FileProjection(b"beta", 0o440),
             "bin": FileProjection(b"\x00\xff", 0o440)},
            id="an explicit default_mode wins",
        ),
        pytest.param(
            ConfigMapVolumeSource(name="cfg", items=[ktp("a", "conf/a.txt"), ktp("bin", "b.bin", 0o600)]), None,
            {"conf/a.txt": FileProjection(b"alpha", 0o644), "b.bin": FileProjection(b"\x00\xff", 0o600)},
            id="items: only their keys, at their paths, item mode over default",
        ),
        pytest.param(
            ConfigMapVolumeSource(name="cfg", optional=True, items=[ktp("a", "a"), ktp("nope", "n")]), None,
            {"a": FileProjection(b"alpha", 0o644)},
            id="optional: a missing key is skipped",
        ),
        pytest.param(ConfigMapVolumeSource(name="gone", optional=True), None, {}, id="optional and not found: empty"),
        pytest.param(
            ConfigMapVolumeSource(name="gone", optional=True, items=[ktp("a", "a")]), None, {},
            id="optional, not found, with items: empty",
        ),
    ],
)
def test_config_map_payload(source, default_mode, expected):
    assert config_map_payload(source, NS, OBJECTS, default_mode=default_mode) == expected


@pytest.mark.parametrize(
    "source, message",
    [
        (ConfigMapVolumeSource(name="gone"), 'configmap "gone" not found'),
        (ConfigMapVolumeSource(name="cfg", items=[ktp("a", "a"), ktp("k", "k")]),
         "configmap references non-existent config key: k"),
    ],
)
def test_config_map_payload_errors_in_go_words(source, message):
    with pytest.raises(VolumePayloadError) as e:
        config_map_payload(source, NS, OBJECTS)
    assert str(e.value) == message


def test_config_map_in_another_namespace_is_not_found():
    with pytest.raises(VolumePayloadError, match='configmap "cfg" not found'):
        config_map_payload(ConfigMapVolumeSource(name="cfg"), "other", OBJECTS)


# --- secret ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, expected",
    [
        pytest.param(SecretVolumeSource(secret_name="sec"),
                     {"user": FileProjection(b"admin", 0o644), "pass": FileProjection(b"s3cret", 0o644)}, id="every key"),
        pytest.param(SecretVolumeSource(secret_name="sec", default_mode=0o400, items=[ktp("pass", "db/pw")]),
                     {"db/pw": FileProjection(b"s3cret", 0o400)}, id="items and the volume's defaultMode"),
        pytest.param(SecretProjection(name="sec", items=[ktp("user", "u", 0o444)]),
                     {"u": FileProjection(b"admin", 0o444)}, id="a projection names it by name"),
        pytest.param(SecretVolumeSource(secret_name="gone", optional=True), {}, id="optional and not found"),
        pytest.param(SecretVolumeSource(secret_name="sec", optional=True, items=[ktp("x", "x")]), {},
                     id="optional and key missing"),
    ],
)
def test_secret_payload(source, expected):
    assert secret_payload(source, NS, OBJECTS) == expected


@pytest.mark.parametrize(
    "source, message",
    [
        (SecretVolumeSource(secret_name="gone"), 'secret "gone" not found'),
        (SecretVolumeSource(secret_name="sec", items=[ktp("tls.key", "k")]), "references non-existent secret key: tls.key"),
    ],
)
def test_secret_payload_errors_in_go_words(source, message):
    with pytest.raises(VolumePayloadError) as e:
        secret_payload(source, NS, OBJECTS)
    assert str(e.value) == message


# --- fsGroup -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode, expected", [(0o644, 0o644), (0o400, 0o440), (0o600, 0o640), (0o000, 0o440), (0o755, 0o755)])
def test_fs_group_owns_every_file_and_makes_it_owner_and_group_readable(mode, expected):
    payload = secret_payload(SecretVolumeSource(secret_name="sec", default_mode=mode), NS, OBJECTS, fs_group=2000)
    assert payload["user"] == FileProjection(b"admin", expected, uid=None, gid=2000)


# --- downwardAPI -------------------------------------------------------------------------


def field(path: str, field_path: str, mode: int | None = None) -> DownwardAPIVolumeFile:
    return DownwardAPIVolumeFile(path=path, field_ref=ObjectFieldSelector(field_path=field_path), mode=mode)


def test_downward_api_payload_renders_each_item_at_its_cleaned_path():
    items = [
        field("name", "metadata.name"),
        field("./meta//labels", "metadata.labels", mode=0o400),
        field("label_a", "metadata.labels['a']"),
        DownwardAPIVolumeFile(path="mem", resource_field_ref=ResourceFieldSelector(
            container_name="c0", resource="limits.memory", divisor="1Mi")),
        DownwardAPIVolumeFile(path="empty"),
    ]
    assert downward_api_payload(items, make_pod(), FACTS) == {
        "name": FileProjection(b"web", 0o644),
        "meta/labels": FileProjection(b'a="1"\nb="2"', 0o400),
        "label_a": FileProjection(b"1", 0o644),
        "mem": FileProjection(b"64", 0o644),
        "empty": FileProjection(b"", 0o644),
    }


def test_downward_api_payload_reports_every_bad_item_together():
    items = [
        field("ok", "metadata.name"),
        field("bad", "metadata.nope"),
        DownwardAPIVolumeFile(path="r", resource_field_ref=ResourceFieldSelector(container_name="ghost", resource="limits.cpu")),
    ]
    with pytest.raises(VolumePayloadError) as e:
        downward_api_payload(items, make_pod(), FACTS)
    assert str(e.value) == "[field label not supported: metadata.nope, container ghost not found]"


def test_downward_api_payload_default_mode_and_fs_group():
    payload = downward_api_payload([field("n", "metadata.name")], make_pod(), FACTS, default_mode=0o400, fs_group=7)
    assert payload == {"n": FileProjection(b"web", 0o440, gid=7)}


# --- projected ---------------------------------------------------------------------------


def projected(*sources: VolumeProjection, default_mode: int | None = None) -> ProjectedVolumeSource:
    return ProjectedVolumeSource(sources=list(sources), default_mode=default_mode)


TOKEN = VolumeProjection(service_account_token=ServiceAccountTokenProjection(path="token", audience="api"))


def test_projected_payload_merges_every_source_under_the_volume_default_mode():
    volume = projected(
        VolumeProjection(config_map=ConfigMapProjection(name="cfg", items=[ktp("a", "app/a")])),
        VolumeProjection(secret=SecretProjection(name="sec", items=[ktp("user", "app/user", 0o400)])),
        VolumeProjection(downward_api=DownwardAPIProjection(items=[field("ns", "metadata.namespace")])),
        TOKEN,
        default_mode=0o444,
    )
    assert projected_payload(volume, make_pod(), FACTS, OBJECTS, {3: b"jwt"}) == {
        "app/a": FileProjection(b"alpha", 0o444),
        "app/user": FileProjection(b"admin", 0o400),
        "ns": FileProjection(b"ns", 0o444),
        "token": FileProjection(b"jwt", 0o444),
    }


def test_projected_payload_later_source_wins_a_shared_path():
    volume = projected(
        VolumeProjection(config_map=ConfigMapProjection(name="cfg", items=[ktp("a", "x")])),
        VolumeProjection(secret=SecretProjection(name="sec", items=[ktp("user", "x")])),
    )
    assert projected_payload(volume, make_pod(), FACTS, OBJECTS, {}) == {"x": FileProjection(b"admin", 0o644)}


def test_projected_payload_skips_a_missing_optional_source_and_keeps_the_others():
    volume = projected(
        VolumeProjection(config_map=ConfigMapProjection(name="gone", optional=True)),
        VolumeProjection(secret=SecretProjection(name="sec", items=[ktp("user", "u")])),
    )
    assert projected_payload(volume, make_pod(), FACTS, OBJECTS, {}) == {"u": FileProjection(b"admin", 0o644)}


def test_projected_payload_reports_every_failing_source_together():
    volume = projected(
        VolumeProjection(config_map=ConfigMapProjection(name="gone")),
        VolumeProjection(secret=SecretProjection(name="sec", items=[ktp("x", "x")])),
        VolumeProjection(downward_api=DownwardAPIProjection(items=[field("ok", "metadata.name")])),
    )
    with pytest.raises(VolumePayloadError) as e:
        projected_payload(volume, make_pod(), FACTS, OBJECTS, {})
    assert str(e.value) == '[configmap "gone" not found, references non-existent secret key: x]'


def test_projected_payload_needs_the_token_of_each_token_source():
    with pytest.raises(VolumePayloadError, match="serviceAccountToken 'token': no token was requested"):
        projected_payload(projected(TOKEN), make_pod(), FACTS, OBJECTS, {})


def test_projected_payload_refuses_sources_pykubelet_lacks():
    volume = projected(VolumeProjection(cluster_trust_bundle={"signerName": "x", "path": "ca"}))
    with pytest.raises(VolumePayloadError, match="clusterTrustBundle is not supported"):
        projected_payload(volume, make_pod(), FACTS, OBJECTS, {})


@pytest.mark.parametrize(
    "pod, fs_group, expected",
    [
        pytest.param(make_pod(), None, FileProjection(b"jwt", 0o644), id="no fsUser, no fsGroup: defaultMode"),
        pytest.param(make_pod(), 3000, FileProjection(b"jwt", 0o640, gid=3000), id="fsGroup: 0600, then 0640"),
        pytest.param(make_pod(pod_uid=1000), None, FileProjection(b"jwt", 0o600, uid=1000), id="fsUser: 0600, owned"),
        pytest.param(make_pod(pod_uid=1000), 3000, FileProjection(b"jwt", 0o640, uid=1000, gid=3000), id="both"),
    ],
)
def test_projected_token_file_mode_and_owner(pod, fs_group, expected):
    payload = projected_payload(projected(TOKEN), pod, FACTS, OBJECTS, {0: b"jwt"}, fs_group=fs_group)
    assert payload == {"token": expected}


def test_projected_fs_group_applies_to_every_source():
    volume = projected(VolumeProjection(config_map=ConfigMapProjection(name="cfg", items=[ktp("a", "a")])), default_mode=0o600)
    assert projected_payload(volume, make_pod(), FACTS, OBJECTS, {}, fs_group=5) == {"a": FileProjection(b"alpha", 0o640, gid=5)}


# --- fsUser ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pod_uid, container_uids, expected",
    [
        (None, (None,), None),
        (1000, (None, None), 1000),
        (1000, (None, 2000), None),
        (None, (2000, 2000), 2000),
        (1000, (2000, 2000), 2000),
        (None, (2000, None), None),
        (0, (None,), 0),
    ],
)
def test_fs_user_from_is_the_run_as_user_all_containers_share(pod_uid, container_uids, expected):
    assert fs_user_from(make_pod(pod_uid=pod_uid, container_uids=container_uids)) == expected


def test_fs_user_from_counts_init_containers():
    pod = make_pod(pod_uid=1000)
    pod.spec.init_containers = [Container(name="init", security_context=SecurityContext(run_as_user=0))]
    assert fs_user_from(pod) is None
