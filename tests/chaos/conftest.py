"""The chaos tests use the integration tests' daemon fixtures (a standalone daemon on a
manifest directory, on the session's private containerd)."""

from tests.integration.conftest import manifests, start_daemon  # noqa: F401 (fixtures)
