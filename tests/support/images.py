"""The test images, built here because no registry is reachable: OCI image-layout tarballs
of busybox (Debian's busybox-static plus applet symlinks) and of a pause (a static C program),
cached under ~/.cache/pykubelet/test-images keyed by their inputs.

Never pull an image by a remote name in tests: even a failing pull resolves the registry's
host name off this machine. Both names below are on "localhost" so that a stray pull stays here.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

PAUSE_IMAGE = "localhost/pykubelet/pause:local"
BUSYBOX_IMAGE = "localhost/pykubelet/busybox:local"


class ContainerdUnavailable(Exception):
    """This machine cannot run the containerd tests; the message says why, prefixed
    "containerd:" (the fixtures turn it into a skip, which CI counts as a failure)."""


_PAUSE_C = r"""
/* The pod sandbox's PID 1: sleeps until TERM or INT, reaps orphans meanwhile. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void on_term(int sig) { (void)sig; _exit(0); }
static void on_chld(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction term = {.sa_handler = on_term};
  struct sigaction chld = {.sa_handler = on_chld, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  sigaction(SIGTERM, &term, 0);
  sigaction(SIGINT, &term, 0);
  sigaction(SIGCHLD, &chld, 0);
  for (;;) pause();
}
"""

_IMAGE_FORMAT = "3"  # bump when the layout below changes, to invalidate cached tarballs
_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def image_cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = base / "pykubelet" / "test-images"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def build_busybox_image(busybox: Path = Path("/bin/busybox")) -> Path:
    binary = busybox.read_bytes()
    key = _cache_key(_IMAGE_FORMAT, binary)
    target = image_cache_dir() / f"busybox-{key}.tar"
    if target.exists():
        return target
    applets = subprocess.run(
        [str(busybox), "--list-full"], capture_output=True, check=True, text=True
    ).stdout.split()
    layer = _Layer()
    for folder in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root", "var", "proc",
                   "sys", "dev"):
        layer.add_dir(folder)
    layer.add_dir("tmp", mode=0o1777)
    layer.add_file("bin/busybox", binary, mode=0o755)
    for applet in applets:
        if applet != "bin/busybox":
            layer.add_symlink(applet, "/bin/busybox")
    layer.add_file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"
                   b"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
    layer.add_file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    config = {"Env": [_PATH_ENV], "Cmd": ["sh"]}
    _write_oci_archive(target, BUSYBOX_IMAGE, layer.finish(), config)
    return target


def build_pause_image() -> Path:
    key = _cache_key(_IMAGE_FORMAT, _PAUSE_C.encode())
    target = image_cache_dir() / f"pause-{key}.tar"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory() as scratch:
        source, binary = Path(scratch) / "pause.c", Path(scratch) / "pause"
        source.write_text(_PAUSE_C)
        compiled = subprocess.run(
            ["gcc", "-static", "-Os", "-s", "-o", str(binary), str(source)],
            capture_output=True, text=True,
        )
        if compiled.returncode != 0:
            raise ContainerdUnavailable(
                "containerd: cannot build the pause test image, gcc -static failed "
                f"(apt-get install gcc libc6-dev): {compiled.stderr.strip()}"
            )
        layer = _Layer()
        layer.add_file("pause", binary.read_bytes(), mode=0o755)
    config = {"Env": [_PATH_ENV], "Entrypoint": ["/pause"]}
    _write_oci_archive(target, PAUSE_IMAGE, layer.finish(), config)
    return target


def _cache_key(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
    return digest.hexdigest()[:16]


class _Layer:
    """An uncompressed, reproducible layer tar (fixed owners and times)."""

    def __init__(self) -> None:
        self._buffer = io.BytesIO()
        self._tar = tarfile.open(fileobj=self._buffer, mode="w", format=tarfile.PAX_FORMAT)

    def _info(self, name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = kind, mode, 0
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    def add_dir(self, name: str, mode: int = 0o755) -> None:
        self._tar.addfile(self._info(name, tarfile.DIRTYPE, mode))

    def add_file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        info = self._info(name, tarfile.REGTYPE, mode)
        info.size = len(data)
        self._tar.addfile(info, io.BytesIO(data))

    def add_symlink(self, name: str, target: str) -> None:
        info = self._info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self._tar.addfile(info)

    def finish(self) -> bytes:
        self._tar.close()
        return self._buffer.getvalue()


def _write_oci_archive(target: Path, name: str, layer: bytes, config: dict) -> None:
    """Write an OCI image-layout tarball holding one single-layer linux/amd64 image."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    blobs: dict[str, bytes] = {}

    def blob(media_type: str, data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    def canonical(document: dict) -> bytes:
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    layer_descriptor = blob("application/vnd.oci.image.layer.v1.tar", layer)
    image_config = {
        "architecture": arch,
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer_descriptor["digest"]]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": blob("application/vnd.oci.image.config.v1+json", canonical(image_config)),
        "layers": [layer_descriptor],
    }
    manifest_descriptor = blob(manifest["mediaType"], canonical(manifest))
    manifest_descriptor["platform"] = {"architecture": arch, "os": "linux"}
    manifest_descriptor["annotations"] = {
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
    }
    index = {"schemaVersion": 2, "manifests": [manifest_descriptor]}

    files = {"oci-layout": canonical({"imageLayoutVersion": "1.0.0"}), "index.json": canonical(index)}
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest.split(":", 1)[1]] = data
    partial = target.with_suffix(f".{os.getpid()}.partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as archive:
        for folder in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            archive.addfile(info)
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    partial.rename(target)  # atomic: concurrent test runs never see half an archive
