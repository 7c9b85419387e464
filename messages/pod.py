"""Kubernetes core/v1 Pod as msgspec Structs: the fields the kubelet reads and reports.

JSON names are the API's (camelCase). Fields the kubelet does not model are dropped on
decode, as the Go kubelet's manifest decoder drops them. Encoding omits defaults, except
for fields the API always carries (a container status's ready and restartCount).
"""

from __future__ import annotations

from typing import Literal

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


class EnvVar(_K8s):
    name: str
    value: str = ""


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


class ResourceRequirements(_K8s):
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}


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
    tty: bool = False


class HostPathVolumeSource(_K8s):
    path: str
    type: str = ""


class EmptyDirVolumeSource(_K8s):
    medium: str = ""
    size_limit: str | None = None


class Volume(_K8s):
    name: str
    host_path: HostPathVolumeSource | None = None
    empty_dir: EmptyDirVolumeSource | None = None


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
    # Only the required terms: the kubelet admits on them; preferred ones are the scheduler's.
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(_K8s):
    node_affinity: NodeAffinity | None = None


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
    host_pid: bool = False
    host_ipc: bool = False
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
