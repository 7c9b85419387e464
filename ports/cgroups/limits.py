"""A cgroup's limits (Go's ResourceConfig) and the files they write on cgroup v1 and v2, as
runc's fs and fs2 writers write them: pure decisions, which the cgroup manager carries out."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CgroupConfig:
    """A cgroup's limits (Go's ResourceConfig, as libcontainer takes it). None leaves a file
    as it is (a new cgroup starts unlimited); -1 writes "unlimited" explicitly. Hugepage sizes
    are named as the cgroup files name them ("2MB", "1GB"); every size of the host not named
    here is limited to 0, as Go's maybeSetHugetlb does."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None  # microseconds per period; -1: unlimited
    cpu_period: int | None = None  # microseconds
    memory_limit: int | None = None  # bytes; -1: unlimited
    pids_limit: int | None = None  # -1: max
    hugepage_limits: dict[str, int] = field(default_factory=dict)  # bytes by page size


@dataclass(frozen=True)
class CgroupWrite:
    """One file write of a config: `optional` ones are skipped where the kernel lacks the file."""

    controller: str
    file: str
    value: str
    optional: bool = False


def cpu_weight_from_shares(shares: int) -> int:
    """cgroup v2 cpu.weight [1, 10000] from v1 cpu.shares [2, 262144] (Go's getCPUWeight)."""
    if shares >= 262144:
        return 10000
    return 1 + ((max(shares, 2) - 2) * 9999) // 262142


def cpu_max_text(quota: int | None, period: int | None) -> str | None:
    """cgroup v2 cpu.max as runc's fs2 writes it: "<quota|max> [<period>]"; an unset or
    negative quota is "max"; None when neither is set (the file is left alone)."""
    if quota is None and period is None:
        return None
    text = str(quota) if quota is not None and quota > 0 else "max"
    return f"{text} {period}" if period else text


def hugepage_size_name(kb: int) -> str:
    """/sys/kernel/mm/hugepages/hugepages-2048kB -> "2MB", as the hugetlb files name it."""
    size, units = kb, ("KB", "MB", "GB", "TB", "PB")
    unit = 0
    while size >= 1024 and size % 1024 == 0 and unit < len(units) - 1:
        size //= 1024
        unit += 1
    return f"{size}{units[unit]}"


def resource_writes(config: CgroupConfig, *, version: int, hugepage_sizes: list[str] | None) -> list[CgroupWrite]:
    """The files a config writes, in order (runc's Set); `hugepage_sizes` None: no hugetlb
    controller, and hugepage limits are skipped as Go skips them."""
    w: list[CgroupWrite] = []
    unlimited = "-1" if version == 1 else "max"
    if version == 1:
        if config.memory_limit is not None:
            w.append(CgroupWrite("memory", "memory.limit_in_bytes", str(config.memory_limit)))
        if config.cpu_shares is not None:
            w.append(CgroupWrite("cpu", "cpu.shares", str(config.cpu_shares)))
        if config.cpu_period is not None:
            w.append(CgroupWrite("cpu", "cpu.cfs_period_us", str(config.cpu_period)))
        if config.cpu_quota is not None:
            w.append(CgroupWrite("cpu", "cpu.cfs_quota_us", str(config.cpu_quota)))
    else:
        if config.memory_limit is not None:
            limit = config.memory_limit
            w.append(CgroupWrite("memory", "memory.max", unlimited if limit < 0 else str(limit)))
        if config.cpu_shares is not None:
            w.append(CgroupWrite("cpu", "cpu.weight", str(cpu_weight_from_shares(config.cpu_shares))))
        cpu_max = cpu_max_text(config.cpu_quota, config.cpu_period)
        if cpu_max is not None:
            w.append(CgroupWrite("cpu", "cpu.max", cpu_max))
    if config.pids_limit is not None:
        w.append(CgroupWrite("pids", "pids.max", "max" if config.pids_limit < 0 else str(config.pids_limit)))
    if hugepage_sizes is not None:
        suffix = "limit_in_bytes" if version == 1 else "max"
        for size in [*hugepage_sizes, *sorted(config.hugepage_limits.keys() - set(hugepage_sizes))]:
            limit = str(config.hugepage_limits.get(size, 0))
            w.append(CgroupWrite("hugetlb", f"hugetlb.{size}.{suffix}", limit))
            w.append(CgroupWrite("hugetlb", f"hugetlb.{size}.rsvd.{suffix}", limit, optional=True))
    return w
