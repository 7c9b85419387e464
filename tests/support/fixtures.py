"""pytest fixtures for tests against a real, private containerd (tests/conftest.py imports
them with `from tests.support.fixtures import *`).

- containerd         session-wide PrivateContainerd with the busybox and pause images
- clean_containerd   the same instance; removes every pod sandbox after the test
- fresh_containerd   a PrivateContainerd of the test's own, for kill()/restart() tests
- containerd_without_network  one of the test's own with no CNI configuration (NetworkReady=false)
- cri                a connected CriClient on clean_containerd, with its own metrics registry

Without root, containerd, runc or busybox-static they skip with a reason that starts with
"containerd:" (CI treats such a skip as a failure).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from prometheus_client import CollectorRegistry

from pykubelet.ports.cri import CriClient, RuntimeOperationMetrics
from tests.support.containerd import (
    ContainerdUnavailable,
    PrivateContainerd,
    build_and_import_images,
    check_prerequisites,
    remove_all_pods,
)

__all__ = ["containerd", "clean_containerd", "fresh_containerd", "containerd_without_network", "cri"]

CRI_TEST_REQUEST_TIMEOUT = 10.0  # seconds; far above any call measured here (< 100 ms)


def _started_containerd(*, cni: bool = True) -> Iterator[PrivateContainerd]:
    try:
        check_prerequisites()
    except ContainerdUnavailable as missing:
        pytest.skip(str(missing))
    instance = PrivateContainerd(cni=cni)
    try:
        instance.start()
        build_and_import_images(instance)
    except ContainerdUnavailable as missing:
        instance.stop()
        pytest.skip(str(missing))
    except BaseException:
        instance.stop()
        raise
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def containerd() -> Iterator[PrivateContainerd]:
    """A private containerd shared by the whole session, with BUSYBOX_IMAGE and PAUSE_IMAGE."""
    yield from _started_containerd()


@pytest.fixture
def clean_containerd(containerd: PrivateContainerd) -> Iterator[PrivateContainerd]:
    """The session's containerd; every pod sandbox is stopped and removed after the test."""
    yield containerd
    if containerd.running:
        remove_all_pods(containerd.socket)


@pytest.fixture
def fresh_containerd() -> Iterator[PrivateContainerd]:
    """A private containerd for this test alone (free to kill() and restart())."""
    yield from _started_containerd()


@pytest.fixture
def containerd_without_network() -> Iterator[PrivateContainerd]:
    """A private containerd for this test alone, started without a CNI configuration: it
    reports NetworkReady=false until the test calls add_cni_config()."""
    yield from _started_containerd(cni=False)


@pytest.fixture
async def cri(clean_containerd: PrivateContainerd) -> AsyncIterator[CriClient]:
    """A CriClient connected to the session containerd; `cri.metrics` has a fresh registry."""
    metrics = RuntimeOperationMetrics(CollectorRegistry())
    async with CriClient(
        clean_containerd.endpoint, request_timeout=CRI_TEST_REQUEST_TIMEOUT, metrics=metrics
    ) as client:
        yield client
