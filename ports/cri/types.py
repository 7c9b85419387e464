"""Small typed results of CRI calls where a plain struct reads better than the protobuf."""

from __future__ import annotations

import msgspec


class RuntimeVersion(msgspec.Struct, frozen=True):
    """VersionResponse: the runtime's name and version and the CRI API version it speaks."""

    runtime_name: str
    runtime_version: str
    runtime_api_version: str
    version: str  # the kubelet runtime API version the runtime reports ("0.1.0")


class RuntimeCondition(msgspec.Struct, frozen=True):
    """One runtime condition, e.g. RuntimeReady or NetworkReady."""

    type: str
    status: bool
    reason: str = ""
    message: str = ""


class RuntimeStatus(msgspec.Struct, frozen=True):
    """StatusResponse: the runtime's conditions (and verbose info, when asked for)."""

    conditions: list[RuntimeCondition]
    info: dict[str, str] = {}

    def condition(self, type: str) -> RuntimeCondition | None:
        for condition in self.conditions:
            if condition.type == type:
                return condition
        return None

    @property
    def runtime_ready(self) -> bool:
        condition = self.condition("RuntimeReady")
        return condition is not None and condition.status

    @property
    def network_ready(self) -> bool:
        condition = self.condition("NetworkReady")
        return condition is not None and condition.status


class ExecSyncResult(msgspec.Struct, frozen=True):
    """What a command run with ExecSync printed and how it exited."""

    stdout: bytes
    stderr: bytes
    exit_code: int
