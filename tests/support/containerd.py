"""A private containerd for integration tests.

PrivateContainerd owns one containerd process with its own root, state, sockets and config
under a short temp dir in /tmp (unix socket paths are limited to 108 bytes), and cleans up
everything that instance left behind: pod sandboxes, shims and their processes, mounts,
shim sockets and empty cgroup folders. build_and_import_images() imports the locally built
test images (tests/support/images.py) with ctr; nothing is ever pulled.

Needs root, containerd, ctr, runc, containerd-shim-runc-v2, busybox-static and gcc with a
static libc (CI installs: containerd runc busybox-static gcc libc6-dev).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from tests.support.images import (
    BUSYBOX_IMAGE,
    PAUSE_IMAGE,
    ContainerdUnavailable,
    build_busybox_image,
    build_pause_image,
)

__all__ = [
    "BUSYBOX_IMAGE",
    "PAUSE_IMAGE",
    "ContainerdUnavailable",
    "PrivateContainerd",
    "build_and_import_images",
    "check_prerequisites",
    "cni_plugins_installed",
    "remove_all_pods",
    "sweep_stale_instances",
]

_DIR_PREFIX = "pykt-ctd-"
_CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
_CNI_CONFIG = """{
  "cniVersion": "1.0.0",
  "name": "pykubelet-test",
  "plugins": [
    {"type": "bridge", "bridge": "pykt0", "isGateway": false, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.251.0/24"}]]}},
    {"type": "loopback"}
  ]
}
"""
_REQUIRED_TOOLS = ("containerd", "ctr", "runc", "containerd-shim-runc-v2")

_CONFIG = """\
# Written by tests/support/containerd.py for a private test instance.
version = 2
root = "{root}"
state = "{state}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image}"
  # Machines without CAP_SYS_RESOURCE (this project's VMs) cannot lower an OOM score: the
  # runtime then keeps negative ones at its own (0) instead of failing every start.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{base}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's own state stays inside this instance instead of /run/containerd/runc.
        Root = "{state}/runc"
"""


def cni_plugins_installed() -> bool:
    """Debian's containernetworking-plugins, which the bridge network needs."""
    return os.path.exists(os.path.join(_CNI_BIN_DIR, "bridge"))


def check_prerequisites() -> None:
    """Raise ContainerdUnavailable naming what is missing (the fixtures turn it into a skip)."""
    if os.geteuid() != 0:
        raise ContainerdUnavailable("containerd: the private containerd needs root")
    missing = [tool for tool in _REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise ContainerdUnavailable(
            f"containerd: {', '.join(missing)} not installed (apt-get install containerd runc)"
        )
    busybox = Path("/bin/busybox")
    if not busybox.exists() or _is_dynamic_elf(busybox):
        raise ContainerdUnavailable(
            "containerd: the busybox test image needs a static /bin/busybox "
            "(apt-get install busybox-static)"
        )
    if shutil.which("gcc") is None:
        raise ContainerdUnavailable(
            "containerd: the pause test image needs gcc (apt-get install gcc libc6-dev)"
        )


class PrivateContainerd:
    """One containerd with its own root, state, socket and config under a temp dir.

    start() returns once the CRI answers; stop() removes every sandbox, ends containerd and
    everything it started, and deletes the temp dir. kill() SIGKILLs containerd alone and
    terminate() stops it with SIGTERM (either way its shims and containers live on, as on a
    real node); restart() starts it again on the same root, state and socket.
    """

    def __init__(self, base_dir: Path | None = None, *, cni: bool = True) -> None:
        self.cni = cni  # False: no network configuration at start, NetworkReady=false (add_cni_config())
        self.base = Path(base_dir) if base_dir else Path(
            tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-", dir="/tmp")
        )
        self.root = self.base / "root"
        self.state = self.base / "state"
        self.socket = str(self.base / "containerd.sock")
        self.endpoint = f"unix://{self.socket}"
        self.config_path = self.base / "config.toml"
        self.log_path = self.base / "containerd.log"
        self._process: subprocess.Popen[bytes] | None = None

    # -- lifecycle --------------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> None:
        sweep_stale_instances()
        for folder in (self.root, self.state, self.base / "cni" / "net.d"):
            folder.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            _CONFIG.format(
                root=self.root, state=self.state, socket=self.socket, base=self.base,
                pause_image=PAUSE_IMAGE,
            )
        )
        if self.cni and cni_plugins_installed():
            # With a network config the CRI plugin reports NetworkReady, so a node turns
            # Ready; the tests' pods use the host network and send nothing through it.
            self.add_cni_config()
        self._spawn()
        self._wait_ready(timeout)

    def add_cni_config(self) -> None:
        """Write the bridge network's configuration; a running containerd picks it up (it
        watches conf_dir) and turns NetworkReady true. Pods on it get 10.244.251.0/24
        addresses on bridge pykt0, with no gateway and no masquerade: nothing is routed."""
        (self.base / "cni" / "net.d" / "10-pykubelet-test.conflist").write_text(_CNI_CONFIG)

    def restart(self, timeout: float = 20.0) -> None:
        """Start containerd again on the same root, state and socket (after kill() or terminate())."""
        if self.running:
            raise RuntimeError(f"containerd at {self.socket} is still running")
        self._spawn()
        self._wait_ready(timeout)

    def kill(self) -> None:
        """SIGKILL containerd only; shims and containers keep running."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def terminate(self, timeout: float = 20.0) -> None:
        """Stop containerd cleanly (SIGTERM), as `systemctl restart containerd` does; its
        shims and containers keep running."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running else None

    def stop(self) -> None:
        """Remove all pod sandboxes, end containerd and all it started, delete the temp dir."""
        if not self.base.exists():
            return
        if self._process is not None and not self.running:
            # Killed by a test: bring it back so that sandboxes are stopped the proper way
            # (containerd re-attaches to its shims on start); brute force follows regardless.
            try:
                self.restart(timeout=10)
            except Exception:
                pass
        if self.running:
            try:
                remove_all_pods(self.socket)
            except Exception:
                pass  # what the CRI could not remove, the brute-force cleanup below does
        ids = _known_ids(self.root, self.state)
        if self._process is not None:
            _terminate(self._process)
            self._process = None
        _cleanup_dir(self.base, ids)

    def __enter__(self) -> PrivateContainerd:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def ctr(self, *args: str, namespace: str = "k8s.io", timeout: float = 60) -> str:
        """Run ctr against this instance; returns stdout, raises with stderr on failure."""
        done = subprocess.run(
            ["ctr", "-n", namespace, "-a", self.socket, *args],
            capture_output=True, timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"ctr {' '.join(args)} against {self.socket} failed: "
                f"{done.stderr.decode(errors='replace').strip()}"
            )
        return done.stdout.decode()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- internals --------------------------------------------------------------------

    def _spawn(self) -> None:
        with open(self.log_path, "ab") as log:
            # Own session: a ^C aimed at pytest must not reach containerd before teardown.
            self._process = subprocess.Popen(
                ["containerd", "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise RuntimeError(
                    f"containerd --config {self.config_path} exited at start:\n{self.log_tail()}"
                )
            if os.path.exists(self.socket):
                with grpc.insecure_channel(f"unix://{self.socket}") as channel:
                    try:
                        api_pb2_grpc.RuntimeServiceStub(channel).Version(
                            api_pb2.VersionRequest(version="v1"), timeout=1
                        )
                        return
                    except grpc.RpcError:
                        pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(
                    f"containerd at {self.socket} did not answer CRI Version within "
                    f"{timeout:g}s:\n{self.log_tail()}"
                )
            time.sleep(0.02)


def build_and_import_images(containerd: PrivateContainerd) -> dict[str, Path]:
    """Build (or take from the cache) the busybox and pause images and import both.

    Returns {image name: tarball path}. Tarballs are cached under ~/.cache/pykubelet (or
    $XDG_CACHE_HOME) keyed by their inputs, so later runs only import (about 50-80 ms each).
    """
    tarballs = {BUSYBOX_IMAGE: build_busybox_image(), PAUSE_IMAGE: build_pause_image()}
    for tarball in tarballs.values():
        containerd.ctr("images", "import", str(tarball))
    return tarballs


def remove_all_pods(socket: str, timeout: float = 30.0, parallel: int = 8) -> None:
    """Stop and remove every container and pod sandbox through the CRI, `parallel` sandboxes
    at a time: one after the other, 500 pods took over ten minutes here (each stop waits on
    runc and the shim), and a timeout on one sent the whole instance to brute force."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        runtime = api_pb2_grpc.RuntimeServiceStub(channel)

        def each(call, items) -> None:
            with ThreadPoolExecutor(parallel) as pool:
                for future in [pool.submit(call, item) for item in items]:
                    future.result()

        containers = runtime.ListContainers(api_pb2.ListContainersRequest(), timeout=timeout)
        each(lambda container: runtime.RemoveContainer(
            api_pb2.RemoveContainerRequest(container_id=container.id), timeout=timeout
        ), containers.containers)

        def remove_sandbox(sandbox) -> None:
            runtime.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox.id), timeout=timeout)
            runtime.RemovePodSandbox(api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sandbox.id), timeout=timeout)

        each(remove_sandbox, runtime.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=timeout).items)


def sweep_stale_instances() -> None:
    """Clean up after earlier test processes that died without their teardown (kill -9)."""
    for base in Path("/tmp").glob(f"{_DIR_PREFIX}*"):
        try:
            owner = int(base.name[len(_DIR_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if owner == os.getpid() or _pid_alive(owner):
            continue
        config = str(base / "config.toml")
        for pid in _pids_with_cmdline_args(["--config", config]):
            _kill_tree(pid)
        _cleanup_dir(base, _known_ids(base / "root", base / "state"))


# -- teardown helpers ------------------------------------------------------------------


def _terminate(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _cleanup_dir(base: Path, ids: set[str]) -> None:
    """Kill this instance's shims and their containers, unmount, rmdir cgroups, delete base."""
    socket = str(base / "containerd.sock")
    _kill_trees(_pids_with_cmdline_args(["-address", socket]))
    _remove_shim_sockets(base / "state")
    ids = ids | _known_ids(base / "root", base / "state")
    unmount_under(base)
    _remove_cgroups(ids)
    if _mounts_under(base):
        # Never rm -rf through a mount point: that would delete whatever is mounted there.
        raise RuntimeError(f"mounts remain under {base}; left it in place: {_mounts_under(base)}")
    shutil.rmtree(base, ignore_errors=True)


def _known_ids(root: Path, state: Path) -> set[str]:
    """Container and sandbox ids this instance has on disk (its CRI store and task bundles)."""
    folders = [
        root / "io.containerd.grpc.v1.cri" / "containers",
        root / "io.containerd.grpc.v1.cri" / "sandboxes",
        state / "io.containerd.grpc.v1.cri" / "sandboxes",
        *(state / "io.containerd.runtime.v2.task").glob("*"),
    ]
    ids: set[str] = set()
    for folder in folders:
        if folder.is_dir():
            ids.update(entry.name for entry in folder.iterdir())
    return ids


def _remove_shim_sockets(state: Path) -> None:
    # Shim sockets live in /run/containerd/s/ whatever the state dir; each bundle's address
    # file names its socket.
    for address_file in (state / "io.containerd.runtime.v2.task").glob("*/*/address"):
        try:
            address = address_file.read_text().strip()
        except OSError:
            continue
        path = address.removeprefix("unix://")
        if path.startswith("/run/containerd/s/"):
            with _ignore_missing():
                os.unlink(path)


def _remove_cgroups(ids: set[str]) -> None:
    """rmdir the (empty) cgroup folders named after this instance's containers and sandboxes."""
    if not ids:
        return
    for mount_point in cgroup_mount_points():
        for folder, subdirs, _ in os.walk(mount_point, topdown=False):
            if os.path.basename(folder) in ids:
                with _ignore_missing():
                    os.rmdir(folder)


def cgroup_mount_points() -> list[str]:
    """Every cgroup hierarchy's mount point (v1 ones, named ones, and cgroup2 beside them)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fs_type = fields[fields.index("-") + 1]
        if fs_type in ("cgroup", "cgroup2"):
            points.append(fields[4])
    return points


def _mounts_under(base: Path) -> list[str]:
    prefix = str(base) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    return points


def unmount_under(base: Path) -> None:
    """Unmount (lazily) every mount point below `base`, deepest first."""
    libc = ctypes.CDLL(None, use_errno=True)
    mnt_detach = 2
    for point in sorted(set(_mounts_under(base)), key=len, reverse=True):
        libc.umount2(point.encode(), mnt_detach)


def _pids_with_cmdline_args(args: list[str]) -> list[int]:
    """Processes whose argv holds `args` as consecutive arguments."""
    wanted = [arg.encode() for arg in args]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(argv[i : i + len(wanted)] == wanted for i in range(len(argv))):
            found.append(int(entry.name))
    return found


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants (a shim and the containers under it)."""
    _kill_trees([pid])


def _kill_trees(pids: list[int]) -> None:
    """SIGKILL these processes and all their descendants, from one reading of /proc: read
    again for each of 500 shims among 9000 processes, it took the cleanup many minutes."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], list(pids)
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    for member in tree:
        with _ignore_missing():
            os.kill(member, signal.SIGKILL)
    for member in tree:
        _wait_gone(member)


def _wait_gone(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while _pid_alive(pid) and time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.01)


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class _ignore_missing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, error: BaseException | None, tb: object) -> bool:
        return isinstance(error, OSError) and error.errno in (
            errno.ENOENT, errno.ESRCH, errno.EBUSY, errno.ENOTEMPTY
        )


def _is_dynamic_elf(path: Path) -> bool:
    """True when the ELF binary has a program interpreter (PT_INTERP), i.e. is not static."""
    data = path.read_bytes()[:4096]
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit ELF only (amd64, arm64)
        return True
    phoff = int.from_bytes(data[0x20:0x28], "little")
    phentsize = int.from_bytes(data[0x36:0x38], "little")
    phnum = int.from_bytes(data[0x38:0x3A], "little")
    pt_interp = 3
    for index in range(phnum):
        offset = phoff + index * phentsize
        if int.from_bytes(data[offset : offset + 4], "little") == pt_interp:
            return True
    return False
