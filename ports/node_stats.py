"""Reading the node's own numbers for /stats/summary: cgroup files (v1 and v2), /proc,
statfs and disk usage, read as cAdvisor reads them, so that the summary needs no cAdvisor
(whose filesystem discovery fails on this machine's virtual disks). The parsers are pure
and take file text; the readers return None for what cannot be read, never raise for it.

actors/server/stats/provider.py hands read_all() a ReadPlan once per request, in a worker thread:
every file of the summary in one batch.
"""

from __future__ import annotations

import os
import stat as stat_module

import msgspec

from pykubelet.pods.stats_summary import Fs, Interface, Memory, Usage, available_bytes, working_set

_READ_SIZE = 65536
# The memory.stat keys cgroup_memory uses (v1 and v2).
MEMORY_STAT_KEYS = frozenset({
    "total_inactive_file", "inactive_file", "total_rss", "rss", "anon", "pgfault", "pgmajfault",
})
# cAdvisor leaves these out of a container's (and the node's) network stats.
IGNORED_DEVICE_PREFIXES = ("lo", "veth", "docker", "nerdctl")


class CgroupMounts(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where the hierarchies that hold the numbers are mounted. v1: the cpuacct and memory
    controllers (one mount each, or cpu,cpuacct together); v2: the unified hierarchy, used
    only when no v1 memory controller is mounted (a hybrid host's /sys/fs/cgroup/unified
    carries no controllers)."""

    cpuacct: str | None = None
    memory: str | None = None
    unified: str | None = None

    @property
    def version(self) -> int:
        return 1 if self.memory or self.cpuacct else 2 if self.unified else 0

    @property
    def tree(self) -> str | None:
        """The hierarchy walked to find containers' and pods' cgroups."""
        return self.memory or self.cpuacct if self.version == 1 else self.unified


class CgroupReading(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    time: float
    cpu_usage_ns: int | None = None
    memory: Memory | None = None
    process_count: int | None = None
    first_pid: int | None = None  # a process in the cgroup (its network namespace is the pod's)


# -- parsers (pure) -------------------------------------------------------------------------


def parse_mount_lines(text: str) -> list[tuple[str, str, list[str]]]:
    """/proc/self/mounts -> (mount point, filesystem type, options) of each mount, in mount
    order (ports/cgroups/mode.py reads every controller's hierarchy from it too)."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            out.append((fields[1], fields[2], fields[3].split(",")))
    return out


def parse_mounts(text: str) -> CgroupMounts:
    """/proc/self/mounts -> the cgroup mounts that matter."""
    cpuacct = memory = unified = None
    for path, fstype, options in parse_mount_lines(text):
        if fstype == "cgroup":
            if "cpuacct" in options and cpuacct is None:
                cpuacct = path
            if "memory" in options and memory is None:
                memory = path
        elif fstype == "cgroup2" and unified is None:
            unified = path
    return CgroupMounts(cpuacct=cpuacct, memory=memory, unified=unified)


def parse_flat_keyed(text: str, keys: frozenset[str] | None = None) -> dict[str, int]:
    """memory.stat, cpu.stat: "key value" lines; only `keys` when given."""
    words = text.split()
    pairs = zip(words[::2], words[1::2])
    return {k: int(v) for k, v in pairs if (keys is None or k in keys) and v.isdigit()}


def parse_int(text: str | None) -> int | None:
    """A one-number file; "max" (v2: no limit) and garbage are None."""
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def cgroup_memory(
    usage: int | None, stat: dict[str, int], limit: int | None, *, version: int, time: float
) -> Memory | None:
    """A cgroup's memory as cAdvisor reports it: working set = usage - inactive file
    (v1 total_inactive_file, v2 inactive_file), rss (v1 total_rss, v2 anon), page faults
    (pgfault, pgmajfault); available = limit - working set when limited."""
    if usage is None:
        return None
    if version == 2:
        inactive, rss = stat.get("inactive_file"), stat.get("anon")
    else:
        inactive = stat.get("total_inactive_file", stat.get("inactive_file"))
        rss = stat.get("total_rss", stat.get("rss"))
    ws = working_set(usage, inactive)
    return Memory(
        time=time, available_bytes=available_bytes(limit, ws), usage_bytes=usage, working_set_bytes=ws,
        rss_bytes=rss, page_faults=stat.get("pgfault"), major_page_faults=stat.get("pgmajfault"),
    )


def meminfo_memory(meminfo: dict[str, int], *, time: float) -> Memory | None:
    """The node's memory from /proc/meminfo (a cgroup v2 root has no memory.current):
    usage = total - free, as runc reads a v2 root; the limit is the machine's memory."""
    total, free = meminfo.get("MemTotal"), meminfo.get("MemFree")
    if total is None or free is None:
        return None
    usage = total - free
    ws = working_set(usage, meminfo.get("Inactive(file)"))
    return Memory(
        time=time, available_bytes=available_bytes(total, ws), usage_bytes=usage, working_set_bytes=ws,
        rss_bytes=meminfo.get("AnonPages"),
    )


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> bytes by field name."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        out[key] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


def parse_boot_time(proc_stat: str) -> int | None:
    """/proc/stat's btime: when the machine booted (the node's startTime in Go)."""
    for line in proc_stat.splitlines():
        if line.startswith("btime "):
            return parse_int(line[6:])
    return None


def parse_running_tasks(loadavg: str) -> int | None:
    """/proc/loadavg's "running/total" field: the number of tasks (Go's curproc)."""
    fields = loadavg.split()
    if len(fields) < 5:
        return None
    _, slash, total = fields[3].partition("/")
    return parse_int(total) if slash else None


def parse_net_dev(text: str) -> list[Interface]:
    """/proc/<pid>/net/dev -> the interfaces cAdvisor counts (not lo, veth*, docker*)."""
    out: list[Interface] = []
    for line in text.splitlines()[2:]:
        name, colon, rest = line.partition(":")
        name = name.strip()
        if not colon or name.lower().startswith(IGNORED_DEVICE_PREFIXES):
            continue
        fields = rest.split()
        if len(fields) < 16:
            continue
        try:
            rx_bytes, rx_errors, tx_bytes, tx_errors = (int(fields[i]) for i in (0, 2, 8, 10))
        except ValueError:
            continue
        out.append(Interface(name=name, rx_bytes=rx_bytes, rx_errors=rx_errors, tx_bytes=tx_bytes, tx_errors=tx_errors))
    return out


def cgroup_id(name: str) -> str:
    """The container id a cgroup folder is named for, as Go's extractIDFromCgroupPath:
    cgroupfs names it by the id, systemd "cri-containerd-<id>.scope"."""
    if name.endswith(".scope"):
        name = name[: -len(".scope")]
        name = name.rsplit("-", 1)[-1]
    return name


def cgroup_pod_uid(name: str) -> str | None:
    """The pod uid a pod cgroup is named for: cgroupfs "pod<uid>", systemd
    "kubepods-<qos>-pod<uid with _>.slice"; None for other folders."""
    if name.endswith(".slice"):
        tail = name[: -len(".slice")].rsplit("-", 1)[-1]
        return tail[3:].replace("_", "-") if tail.startswith("pod") and len(tail) > 3 else None
    return name[3:] if name.startswith("pod") and len(name) > 3 and "." not in name else None


# -- readers ---------------------------------------------------------------------------------


def read_text(path: str) -> str | None:
    """A small file's text, or None when it cannot be read. os.read, not open(): a summary
    reads a thousand cgroup files, and the file object costs more than the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = [os.read(fd, _READ_SIZE)]
        while len(chunks[-1]) == _READ_SIZE:  # a short read is the end (seq_file too)
            chunks.append(os.read(fd, _READ_SIZE))
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def read_cgroup_mounts(mounts_file: str = "/proc/self/mounts") -> CgroupMounts:
    return parse_mounts(read_text(mounts_file) or "")


def read_cgroup(
    mounts: CgroupMounts, path: str, *, now: float, memory_limit: int | None = None, processes: bool = True
) -> CgroupReading | None:
    """The numbers of the cgroup at `path` (relative to each hierarchy, "/" for the root);
    None when the cgroup is not there. `memory_limit` overrides the cgroup's own (the
    root's limit is the machine's memory, as cAdvisor has it); `processes`: count them."""
    rel = path.strip("/")
    if mounts.version == 1:
        memory_dir = _under(mounts.memory, rel)
        cpu_dir = _under(mounts.cpuacct, rel)
        cpu = parse_int(read_text(f"{cpu_dir}/cpuacct.usage")) if cpu_dir else None
        usage = parse_int(read_text(f"{memory_dir}/memory.usage_in_bytes")) if memory_dir else None
        if cpu is None and usage is None:
            return None  # gone (or never there)
        memory = None
        if usage is not None:
            stat = parse_flat_keyed(read_text(f"{memory_dir}/memory.stat") or "", MEMORY_STAT_KEYS)
            limit = memory_limit if memory_limit is not None else parse_int(
                read_text(f"{memory_dir}/memory.limit_in_bytes"))
            memory = cgroup_memory(usage, stat, limit, version=1, time=now)
        procs_dir = memory_dir if usage is not None else cpu_dir
    elif mounts.version == 2 and mounts.unified:
        folder = procs_dir = _under(mounts.unified, rel)
        cpu_stat = read_text(f"{folder}/cpu.stat")
        usage = parse_int(read_text(f"{folder}/memory.current"))
        if cpu_stat is None and usage is None:
            return None
        usage_usec = parse_flat_keyed(cpu_stat or "").get("usage_usec")
        cpu = usage_usec * 1000 if usage_usec is not None else None
        stat = parse_flat_keyed(read_text(f"{folder}/memory.stat") or "", MEMORY_STAT_KEYS)
        limit = memory_limit if memory_limit is not None else parse_int(read_text(f"{folder}/memory.max"))
        memory = cgroup_memory(usage, stat, limit, version=2, time=now)
    else:
        return None
    pids = read_pids(procs_dir) if processes and procs_dir else None
    return CgroupReading(
        time=now, cpu_usage_ns=cpu, memory=memory,
        process_count=len(pids) if pids is not None else None,
        first_pid=pids[0] if pids else None,
    )


def read_pids(folder: str) -> list[int] | None:
    """The processes in the cgroup at `folder` (its cgroup.procs); None when it is gone."""
    text = read_text(f"{folder}/cgroup.procs")
    if text is None:
        return None
    try:
        return [int(pid) for pid in text.split()]
    except ValueError:
        return None


def cgroup_folder(mounts: CgroupMounts, path: str) -> str | None:
    """Where the cgroup at `path` keeps its cgroup.procs."""
    return _under(mounts.tree, path.strip("/"))


def _under(root: str | None, rel: str) -> str | None:
    if root is None:
        return None
    return f"{root}/{rel}" if rel else root


def scan_cgroups(
    mounts: CgroupMounts, container_ids: set[str], pod_uids: set[str], *, max_depth: int = 10
) -> tuple[dict[str, str], dict[str, str]]:
    """Find the cgroups of these containers (and sandboxes) and pods by folder name, as
    cAdvisor maps cgroups to CRI containers, without asking the runtime: {id: path},
    {pod uid: path}, paths relative to the hierarchy ("/k8s.io/<id>")."""
    root = mounts.tree
    containers: dict[str, str] = {}
    pods: dict[str, str] = {}
    if root is None or not (container_ids or pod_uids):
        return containers, pods
    stack = [("", 0)]
    while stack:
        rel, depth = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(root, rel.lstrip("/"))))
        except OSError:
            continue
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            child = f"{rel}/{entry.name}"
            cid = cgroup_id(entry.name)
            if cid in container_ids:
                containers[cid] = child
                continue  # a container's cgroup holds no other container
            uid = cgroup_pod_uid(entry.name)
            if uid is not None and uid in pod_uids:
                pods[uid] = child
            if depth + 1 < max_depth:
                stack.append((child, depth + 1))
        if len(containers) == len(container_ids) and len(pods) == len(pod_uids):
            break  # all found
    return containers, pods


def statfs(path: str, *, now: float) -> Fs | None:
    """The filesystem holding `path`: sizes as cAdvisor reports them (available to
    unprivileged users; used = blocks - free)."""
    try:
        fs = os.statvfs(path)
    except OSError:
        return None
    return Fs(
        time=now,
        available_bytes=fs.f_bavail * fs.f_frsize,
        capacity_bytes=fs.f_blocks * fs.f_frsize,
        used_bytes=(fs.f_blocks - fs.f_bfree) * fs.f_frsize,
        inodes_free=fs.f_ffree,
        inodes=fs.f_files,
        inodes_used=fs.f_files - fs.f_ffree,
    )


def disk_usage(path: str, *, now: float) -> Usage | None:
    """du of `path` (a file or a tree, symlinks not followed, hard links once): bytes in
    allocated blocks and inodes, as Go's MetricsDu; None when it is not there."""
    try:
        top = os.lstat(path)
    except OSError:
        return None
    seen: set[tuple[int, int]] = {(top.st_dev, top.st_ino)}
    used, inodes = top.st_blocks * 512, 1
    if stat_module.S_ISDIR(top.st_mode):
        stack = [path]
        while stack:
            try:
                entries = list(os.scandir(stack.pop()))
            except OSError:
                continue
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
                used += st.st_blocks * 512
                inodes += 1
                if stat_module.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
    return Usage(time=now, used_bytes=used, inodes_used=inodes)


def files_usage(directory: str, *, now: float) -> Usage | None:
    """du of the files (not folders) right in `directory`: a container's log files, or a
    pod's own (Go's fileMetricsByDir); None when the folder is not there."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return None
    used = inodes = 0
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat_module.S_ISDIR(st.st_mode):
            continue
        used += st.st_blocks * 512
        inodes += 1
    return Usage(time=now, used_bytes=used, inodes_used=inodes)


def read_net_dev(pid: int | None = None) -> list[Interface] | None:
    """The interfaces of a process's network namespace (None: this process's, the node's)."""
    text = read_text(f"/proc/{pid}/net/dev" if pid else "/proc/net/dev")
    return parse_net_dev(text) if text is not None else None


def network_namespace(pid: int) -> int | None:
    """The inode of a process's network namespace: pods that share one (host network)
    share its numbers, read once."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def read_boot_time() -> int | None:
    return parse_boot_time(read_text("/proc/stat") or "")


def read_meminfo() -> dict[str, int]:
    return parse_meminfo(read_text("/proc/meminfo") or "")


def read_task_limits() -> tuple[int | None, int | None]:
    """Go's pidlimit.Stats: the lower of kernel.pid_max and kernel.threads-max, and the
    number of tasks from /proc/loadavg."""
    limits = [parse_int(read_text(f"/proc/sys/kernel/{name}")) for name in ("pid_max", "threads-max")]
    known = [limit for limit in limits if limit is not None]
    return (min(known) if known else None), parse_running_tasks(read_text("/proc/loadavg") or "")


# -- one request's reads ---------------------------------------------------------------------


class ReadPlan(msgspec.Struct, kw_only=True):
    """What one summary needs from files. Container and sandbox ids are the CRI's."""

    now: float
    mounts: CgroupMounts
    full: bool  # False: only_cpu_and_memory
    container_ids: set[str]  # the running containers shown
    measure_ids: set[str] = set()  # those whose cpu and memory the runtime did not give
    sandbox_ids: set[str] = set()
    measure_uids: set[str] = set()  # pods whose own cpu and memory the runtime did not give
    cgroups: dict[str, str] = {}  # known cgroup paths of these containers and sandboxes
    pod_cgroups: dict[str, str] = {}
    scan: bool = False  # look for the cgroups not known yet
    root_dir: str = "/"
    image_mounts: list[str] = []
    log_dirs: dict[str, str] = {}  # container id -> its log folder
    pod_log_dirs: dict[str, str] = {}  # pod uid -> its log folder
    etc_hosts: dict[str, str] = {}  # pod uid -> its etc-hosts file
    volumes: dict[str, list[str]] = {}  # pod uid -> its volume folders to measure
    volume_usage: dict[str, Usage] = {}  # volumes measured recently enough, by folder


class Readings(msgspec.Struct, kw_only=True):
    node_cgroup: CgroupReading | None = None
    node_memory: Memory | None = None  # from /proc/meminfo when the root cgroup has none
    node_network: list[Interface] | None = None
    boot_time: int | None = None
    max_pid: int | None = None
    cur_proc: int | None = None
    cgroup_paths: dict[str, str] = {}  # known after this read (found, and not gone)
    pod_cgroup_paths: dict[str, str] = {}
    containers: dict[str, CgroupReading] = {}  # measured containers, by id
    process_counts: dict[str, int] = {}  # by container id
    pods: dict[str, CgroupReading] = {}  # by pod uid
    networks: dict[str, list[Interface]] = {}  # by sandbox id
    statfs: dict[str, Fs] = {}  # by path
    logs: dict[str, Usage] = {}  # by container id
    pod_logs: dict[str, Usage] = {}  # by pod uid
    etc_hosts: dict[str, Usage] = {}  # by pod uid
    volume_usage: dict[str, Usage] = {}  # by folder


def read_all(plan: ReadPlan) -> Readings:
    out = Readings()
    now, mounts, full = plan.now, plan.mounts, plan.full
    meminfo = read_meminfo()
    out.node_cgroup = read_cgroup(mounts, "/", now=now, memory_limit=meminfo.get("MemTotal"), processes=False)
    if out.node_cgroup is None or out.node_cgroup.memory is None:
        out.node_memory = meminfo_memory(meminfo, time=now)
    out.boot_time = read_boot_time()
    paths, pod_paths = dict(plan.cgroups), dict(plan.pod_cgroups)
    if plan.scan:
        wanted = plan.measure_ids | (plan.container_ids | plan.sandbox_ids if full else set())
        found, found_pods = scan_cgroups(mounts, wanted - paths.keys(), plan.measure_uids - pod_paths.keys())
        paths.update(found)
        pod_paths.update(found_pods)
    for cid in plan.measure_ids & paths.keys():
        reading = read_cgroup(mounts, paths[cid], now=now, processes=full)
        if reading is None:
            del paths[cid]  # gone: looked for again at the next scan
            continue
        out.containers[cid] = reading
        if reading.process_count is not None:
            out.process_counts[cid] = reading.process_count
    for uid in plan.measure_uids & pod_paths.keys():
        reading = read_cgroup(mounts, pod_paths[uid], now=now, processes=False)
        if reading is None:
            del pod_paths[uid]
        else:
            out.pods[uid] = reading
    out.cgroup_paths, out.pod_cgroup_paths = paths, pod_paths
    if not full:
        return out
    for cid in (plan.container_ids - plan.measure_ids) & paths.keys():
        pids = read_pids(cgroup_folder(mounts, paths[cid]) or "")
        if pids is None:
            del paths[cid]
        else:
            out.process_counts[cid] = len(pids)
    out.node_network = read_net_dev()
    out.max_pid, out.cur_proc = read_task_limits()
    namespaces: dict[int, list[Interface] | None] = {}  # host-network pods share the node's
    for sid in plan.sandbox_ids & paths.keys():
        # The sandbox's (pause) process: its network namespace is the pod's.
        pids = read_pids(cgroup_folder(mounts, paths[sid]) or "")
        if pids is None:
            del paths[sid]
            continue
        if not pids:
            continue
        netns = network_namespace(pids[0])
        if netns is None:
            interfaces = read_net_dev(pids[0])
        elif netns in namespaces:
            interfaces = namespaces[netns]
        else:
            interfaces = namespaces[netns] = read_net_dev(pids[0])
        if interfaces is not None:
            out.networks[sid] = interfaces
    for path in {plan.root_dir, *plan.image_mounts}:
        fs = statfs(path, now=now)
        if fs is not None:
            out.statfs[path] = fs
    for cid, folder in plan.log_dirs.items():
        usage = files_usage(folder, now=now)
        if usage is not None:
            out.logs[cid] = usage
    for uid, folder in plan.pod_log_dirs.items():
        usage = files_usage(folder, now=now)
        if usage is not None:
            out.pod_logs[uid] = usage
    for uid, path in plan.etc_hosts.items():
        usage = disk_usage(path, now=now)
        if usage is not None:
            out.etc_hosts[uid] = usage
    for folder in (folder for folders in plan.volumes.values() for folder in folders):
        usage = plan.volume_usage.get(folder) or disk_usage(folder, now=now)
        fs = statfs(folder, now=now) if usage is not None else None
        if usage is not None and fs is not None:
            out.volume_usage[folder] = usage
            out.statfs[folder] = fs
    return out
