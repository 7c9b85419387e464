"""Kubernetes core/v1 Pod as msgspec Structs: the fields the kubelet reads and reports.

JSON names are the API's (camelCase). Every field of PodSpec, Container and Volume that
the API defines is here, so that nothing a cluster sends is lost on decoding: the fields
pykubelet implements are typed; the ones it does not are kept as plain JSON (`Any`), and
pods/unsupported.py names them when a pod sets them. Encoding omits defaults, except for
fields the API always carries (a container status's ready and restartCount).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class _K8s(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    pass


# --- metadata ------------------------------------------------------------------------


class OwnerReference(_K8s):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None


class ObjectMeta(_K8s):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: list[OwnerReference] = []


# --- spec ----------------------------------------------------------------------------


class ExecAction(_K8s):
    command: list[str] = []


class HTTPHeader(_K8s):
    name: str
    value: str


class HTTPGetAction(_K8s):
    path: str = ""
    port: int | str = 0
    host: str = ""
    scheme: str = "HTTP"
    http_headers: list[HTTPHeader] = msgspec.field(default_factory=list, name="httpHeaders")


class TCPSocketAction(_K8s):
    port: int | str = 0
    host: str = ""


class GRPCAction(_K8s):
    port: int = 0
    service: str | None = None


class SleepAction(_K8s):
    seconds: int = 0


class Probe(_K8s):
    exec: ExecAction | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None
    grpc: GRPCAction | None = None
    initial_delay_seconds: int = 0
    timeout_seconds: int = 0
    period_seconds: int = 0
    success_threshold: int = 0
    failure_threshold: int = 0
    termination_grace_period_seconds: int | None = None


class LifecycleHandler(_K8s):
    exec: ExecAction | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None
    sleep: SleepAction | None = None


class Lifecycle(_K8s):
    post_start: LifecycleHandler | None = None
    pre_stop: LifecycleHandler | None = None
    stop_signal: str | None = None  # not implemented (pods/unsupported.py)


class ObjectFieldSelector(_K8s):
    field_path: str
    api_version: str = ""


class ResourceFieldSelector(_K8s):
    resource: str
    container_name: str = ""
    divisor: str | int | float | None = None


class ConfigMapKeySelector(_K8s):
    key: str
    name: str = ""
    optional: bool | None = None


class SecretKeySelector(_K8s):
    key: str
    name: str = ""
    optional: bool | None = None


class EnvVarSource(_K8s):
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None
    config_map_key_ref: ConfigMapKeySelector | None = None
    secret_key_ref: SecretKeySelector | None = None
    file_key_ref: Any = None  # not implemented (pods/unsupported.py)


class EnvVar(_K8s):
    name: str
    value: str = ""
    value_from: EnvVarSource | None = None


class ConfigMapEnvSource(_K8s):
    name: str = ""
    optional: bool | None = None


class SecretEnvSource(_K8s):
    name: str = ""
    optional: bool | None = None


class EnvFromSource(_K8s):
    prefix: str = ""
    config_map_ref: ConfigMapEnvSource | None = None
    secret_ref: SecretEnvSource | None = None


class ContainerPort(_K8s):
    container_port: int
    name: str = ""
    protocol: str = "TCP"
    host_port: int = 0
    host_ip: str = msgspec.field(default="", name="hostIP")


class VolumeMount(_K8s):
    name: str
    mount_path: str
    read_only: bool = False
    sub_path: str = ""
    sub_path_expr: str = ""
    mount_propagation: str = ""
    recursive_read_only: str = ""


class ResourceRequirements(_K8s):
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    claims: Any = None  # dynamic resource allocation: not implemented


class Capabilities(_K8s):
    add: list[str] = []
    drop: list[str] = []


class SeccompProfile(_K8s):
    type: str
    localhost_profile: str | None = None


class AppArmorProfile(_K8s):
    type: str
    localhost_profile: str | None = None


class SecurityContext(_K8s):
    """A container's; where it sets a field the pod's PodSecurityContext also has, it wins."""

    capabilities: Capabilities | None = None
    privileged: bool | None = None
    run_as_user: int | None = None
    run_as_group: int | None = None
    run_as_non_root: bool | None = None
    read_only_root_filesystem: bool | None = None
    allow_privilege_escalation: bool | None = None
    proc_mount: str | None = None
    seccomp_profile: SeccompProfile | None = None
    app_armor_profile: AppArmorProfile | None = None
    se_linux_options: Any = None
    windows_options: Any = None


class Sysctl(_K8s):
    name: str
    value: str


class PodSecurityContext(_K8s):
    run_as_user: int | None = None
    run_as_group: int | None = None
    run_as_non_root: bool | None = None
    supplemental_groups: list[int] = []
    supplemental_groups_policy: str | None = None
    fs_group: int | None = None
    fs_group_change_policy: str | None = None
    sysctls: list[Sysctl] = []
    seccomp_profile: SeccompProfile | None = None
    app_armor_profile: AppArmorProfile | None = None
    se_linux_options: Any = None
    se_linux_change_policy: Any = None
    windows_options: Any = None


class Container(_K8s):
    name: str = ""
    image: str = ""
    command: list[str] = []
    args: list[str] = []
    working_dir: str = ""
    env: list[EnvVar] = []
    ports: list[ContainerPort] = []
    resources: ResourceRequirements | None = None
    volume_mounts: list[VolumeMount] = []
    image_pull_policy: str = ""
    restart_policy: str | None = None  # init containers only: "Always" makes a sidecar
    liveness_probe: Probe | None = None
    readiness_probe: Probe | None = None
    startup_probe: Probe | None = None
    lifecycle: Lifecycle | None = None
    termination_message_path: str = ""
    termination_message_policy: str = ""
    stdin: bool = False
    stdin_once: bool = False
    tty: bool = False
    env_from: list[EnvFromSource] = []
    security_context: SecurityContext | None = None
    resize_policy: Any = None
    restart_policy_rules: Any = None
    volume_devices: Any = None


class HostPathVolumeSource(_K8s):
    path: str
    type: str = ""


class EmptyDirVolumeSource(_K8s):
    medium: str = ""
    size_limit: str | None = None


class KeyToPath(_K8s):
    key: str
    path: str
    mode: int | None = None


class ConfigMapVolumeSource(_K8s):
    name: str = ""
    items: list[KeyToPath] = []
    default_mode: int | None = None
    optional: bool | None = None


class SecretVolumeSource(_K8s):
    secret_name: str = ""
    items: list[KeyToPath] = []
    default_mode: int | None = None
    optional: bool | None = None


class DownwardAPIVolumeFile(_K8s):
    path: str
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None
    mode: int | None = None


class DownwardAPIVolumeSource(_K8s):
    items: list[DownwardAPIVolumeFile] = []
    default_mode: int | None = None


class ConfigMapProjection(_K8s):
    name: str = ""
    items: list[KeyToPath] = []
    optional: bool | None = None


class SecretProjection(_K8s):
    name: str = ""
    items: list[KeyToPath] = []
    optional: bool | None = None


class DownwardAPIProjection(_K8s):
    items: list[DownwardAPIVolumeFile] = []


class ServiceAccountTokenProjection(_K8s):
    path: str
    audience: str = ""
    expiration_seconds: int | None = None


class VolumeProjection(_K8s):
    config_map: ConfigMapProjection | None = None
    secret: SecretProjection | None = None
    downward_api: DownwardAPIProjection | None = msgspec.field(default=None, name="downwardAPI")
    service_account_token: ServiceAccountTokenProjection | None = None
    cluster_trust_bundle: Any = None  # not implemented
    pod_certificate: Any = None  # not implemented


class ProjectedVolumeSource(_K8s):
    sources: list[VolumeProjection] = []
    default_mode: int | None = None


# The volume types of the API that pykubelet cannot mount; a pod using one fails to start
# with a FailedMount event naming the volume and its type.
UNSUPPORTED_VOLUME_TYPES = (
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "ephemeral", "fc",
    "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "image", "iscsi", "nfs",
    "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO",
    "storageos", "vsphereVolume",
)


class Volume(_K8s):
    name: str
    host_path: HostPathVolumeSource | None = None
    empty_dir: EmptyDirVolumeSource | None = None
    config_map: ConfigMapVolumeSource | None = None
    secret: SecretVolumeSource | None = None
    downward_api: DownwardAPIVolumeSource | None = msgspec.field(default=None, name="downwardAPI")
    projected: ProjectedVolumeSource | None = None
    aws_elastic_block_store: Any = None
    azure_disk: Any = None
    azure_file: Any = None
    cephfs: Any = None
    cinder: Any = None
    csi: Any = None
    ephemeral: Any = None
    fc: Any = None
    flex_volume: Any = None
    flocker: Any = None
    gce_persistent_disk: Any = None
    git_repo: Any = None
    glusterfs: Any = None
    image: Any = None
    iscsi: Any = None
    nfs: Any = None
    persistent_volume_claim: Any = None
    photon_persistent_disk: Any = None
    portworx_volume: Any = None
    quobyte: Any = None
    rbd: Any = None
    scale_io: Any = msgspec.field(default=None, name="scaleIO")
    storageos: Any = None
    vsphere_volume: Any = None

    @property
    def type(self) -> str:
        """The API name of the volume's source ("configMap", "persistentVolumeClaim"), or ""."""
        for field in msgspec.structs.fields(self):
            if field.name != "name" and getattr(self, field.name) is not None:
                return field.encode_name
        return ""


class Toleration(_K8s):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class NodeSelectorRequirement(_K8s):
    key: str
    operator: str  # In NotIn Exists DoesNotExist Gt Lt (matchFields: In NotIn)
    values: list[str] = []


class NodeSelectorTerm(_K8s):
    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeSelectorRequirement] = []


class NodeSelector(_K8s):
    node_selector_terms: list[NodeSelectorTerm] = []


class NodeAffinity(_K8s):
    # The kubelet admits on the required terms; preferred ones are the scheduler's.
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: Any = None


class Affinity(_K8s):
    node_affinity: NodeAffinity | None = None
    pod_affinity: Any = None  # the scheduler's
    pod_anti_affinity: Any = None  # the scheduler's


class PodDNSConfigOption(_K8s):
    name: str = ""
    value: str | None = None


class PodDNSConfig(_K8s):
    nameservers: list[str] = []
    searches: list[str] = []
    options: list[PodDNSConfigOption] = []


class HostAlias(_K8s):
    ip: str
    hostnames: list[str] = []


class PodReadinessGate(_K8s):
    condition_type: str


RestartPolicy = Literal["Always", "OnFailure", "Never"]


class PodSpec(_K8s):
    containers: list[Container] = []
    init_containers: list[Container] = []
    restart_policy: str = ""
    termination_grace_period_seconds: int | None = None
    active_deadline_seconds: int | None = None
    dns_policy: str = ""
    node_name: str = ""
    host_network: bool = False
    host_pid: bool = msgspec.field(default=False, name="hostPID")
    host_ipc: bool = msgspec.field(default=False, name="hostIPC")
    hostname: str = ""
    subdomain: str = ""
    service_account_name: str = ""
    scheduler_name: str = ""
    priority_class_name: str = ""
    priority: int | None = None
    enable_service_links: bool | None = None
    volumes: list[Volume] = []
    tolerations: list[Toleration] = []
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    security_context: PodSecurityContext | None = None
    dns_config: PodDNSConfig | None = None
    host_aliases: list[HostAlias] = []
    set_hostname_as_fqdn: bool | None = msgspec.field(default=None, name="setHostnameAsFQDN")
    readiness_gates: list[PodReadinessGate] = []
    automount_service_account_token: bool | None = None
    service_account: str = ""  # deprecated alias of serviceAccountName
    share_process_namespace: bool | None = None
    image_pull_secrets: list[dict[str, str]] = []
    overhead: dict[str, str] = {}
    runtime_class_name: str | None = None
    preemption_policy: str | None = None
    topology_spread_constraints: Any = None
    scheduling_gates: Any = None
    scheduling_group: Any = None
    os: Any = None
    ephemeral_containers: Any = None
    resource_claims: Any = None
    resources: Any = None  # pod-level resources
    host_users: bool | None = None
    hostname_override: str | None = None


# --- status --------------------------------------------------------------------------


class ContainerStateWaiting(_K8s):
    reason: str = ""
    message: str = ""


class ContainerStateRunning(_K8s):
    started_at: str | None = None


class ContainerStateTerminated(_K8s):
    exit_code: int
    signal: int = 0
    reason: str = ""
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    container_id: str = msgspec.field(default="", name="containerID")


class ContainerState(_K8s):
    waiting: ContainerStateWaiting | None = None
    running: ContainerStateRunning | None = None
    terminated: ContainerStateTerminated | None = None


class ContainerStatus(_K8s):
    name: str
    ready: bool
    restart_count: int
    state: ContainerState = msgspec.field(default_factory=ContainerState)
    last_state: ContainerState = msgspec.field(default_factory=ContainerState)
    image: str = ""
    image_id: str = msgspec.field(default="", name="imageID")
    container_id: str = msgspec.field(default="", name="containerID")
    started: bool | None = None
    # In-place resize (GA in 1.35): what a running container was given, and what it runs with.
    allocated_resources: dict[str, str] | None = None
    resources: ResourceRequirements | None = None


class PodCondition(_K8s):
    type: str
    status: str  # "True" | "False" | "Unknown"
    last_probe_time: str | None = None
    last_transition_time: str | None = None
    reason: str = ""
    message: str = ""


class PodIP(_K8s):
    ip: str


class PodStatus(_K8s):
    phase: str = ""
    conditions: list[PodCondition] = []
    message: str = ""
    reason: str = ""
    host_ip: str = msgspec.field(default="", name="hostIP")
    pod_ip: str = msgspec.field(default="", name="podIP")
    pod_ips: list[PodIP] = msgspec.field(default_factory=list, name="podIPs")
    start_time: str | None = None
    init_container_statuses: list[ContainerStatus] = []
    container_statuses: list[ContainerStatus] = []
    qos_class: str = ""


class Pod(_K8s):
    api_version: str = "v1"
    kind: str = "Pod"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)

    @property
    def full_name(self) -> str:
        """namespace/name, as the kubelet logs a pod."""
        return f"{self.metadata.namespace}/{self.metadata.name}"


class ListMeta(_K8s):
    resource_version: str = ""


class PodList(_K8s):
    # No defaults: a list always carries these, as the API serves it.
    api_version: str
    kind: str
    metadata: ListMeta
    items: list[Pod]


def pod_list(pods: list[Pod]) -> PodList:
    return PodList(api_version="v1", kind="PodList", metadata=ListMeta(), items=pods)
