"""The health board: each subsystem reports its own check here; the server reads it.

A check is named for what an operator would restart or look at (runtime, pleg,
sync loop). healthz is 200 only when every registered check passes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


class HealthBoard:
    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}

    def register(self, name: str, detail: str) -> None:
        """Declare a check that fails until its owner first reports success."""
        self._checks.setdefault(name, Check(name, False, detail))

    def report(self, name: str, ok: bool, detail: str) -> None:
        self._checks[name] = Check(name, ok, detail)

    def checks(self) -> list[Check]:
        return list(self._checks.values())

    def failing(self) -> list[Check]:
        return [check for check in self._checks.values() if not check.ok]

    @property
    def healthy(self) -> bool:
        return not self.failing()
