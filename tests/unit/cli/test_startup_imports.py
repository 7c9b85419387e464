"""What the daemon's entry point imports: packages it needs only in some configurations
stay out of a standalone start, where they would hold memory for nothing
(docs/performance.md, "110 pods at rest"). Their lazy paths are tested where they live."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Loaded where they are needed: cryptography by the child that makes a self-signed
# certificate (ports/serving_cert.py) and with a clientCAFile (actors/server/auth.py);
# httpx by the API client (cluster mode), the first httpGet probe or hook, --manifest-url;
# the kubeconfig loader and the cluster-only actors in cluster mode (cli/run.py,
# actors/root.py); the log reader and the upgrade proxy by the first /containerLogs, exec,
# attach or port-forward (actors/server/debugging.py); difflib by a misspelled flag or
# configuration field (cli/config/). grpc by nothing of the daemon: the CRI port and the gRPC
# probes speak gRPC through ports/grpc_client, and messages/cri_api loads the CRI's messages
# without the stubs that would import it (10.9 MB resident).
LAZY = (
    "cryptography", "httpx", "httpcore", "difflib", "grpc", "asyncio",
    "pykubelet.ports.apiserver.client", "pykubelet.ports.apiserver.kubeconfig",
    "pykubelet.actors.event_sink", "pykubelet.actors.mirror_pods", "pykubelet.actors.sources.api",
    "pykubelet.actors.status_manager", "pykubelet.actors.status_sync",
    "pykubelet.pods.container_logs", "pykubelet.ports.container_log_reader", "pykubelet.ports.upgrade_proxy",
)

_LOADED = """
import json, sys
import pykubelet.cli.run
import pykubelet.actors.root
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by_the_entry_point() -> set[str]:
    done = subprocess.run([sys.executable, "-c", _LOADED], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout))


def test_the_daemon_entry_point_does_not_import_what_only_some_configurations_need():
    loaded = loaded_by_the_entry_point()
    # The check sees the real imports: the CRI messages are there, under the package's name.
    assert "pykubelet.actors.root" in loaded and "cri_api.v1.api_pb2" in loaded
    assert sorted(m for m in loaded if m in LAZY or m.split(".")[0] in LAZY) == []


def loaded_after(code: str) -> list[str]:
    """The LAZY modules loaded once `code` has run in a fresh interpreter (the daemon's
    entry point imported first)."""
    program = f"import json, sys\nimport pykubelet.cli.run\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    return sorted(m for m in json.loads(done.stdout) if m in LAZY)


def test_the_api_client_and_httpx_are_loaded_when_cluster_mode_asks_for_the_client():
    assert loaded_after("from pykubelet.ports.apiserver import ApiError, decode") == []
    assert loaded_after("from pykubelet.ports.apiserver import load_kubeconfig") == [
        "pykubelet.ports.apiserver.kubeconfig"]
    assert loaded_after("from pykubelet.ports.apiserver import ApiClient; assert ApiClient.__name__") == [
        "httpx", "pykubelet.ports.apiserver.client", "pykubelet.ports.apiserver.kubeconfig"]
    code = "from pykubelet.actors import root\nassert root.api_client().__name__ == 'ApiClient'"
    assert loaded_after(code) == ["httpx", "pykubelet.ports.apiserver.client", "pykubelet.ports.apiserver.kubeconfig"]


def test_an_unknown_name_of_the_api_server_port_is_still_an_attribute_error():
    import pykubelet.ports.apiserver as port

    with pytest.raises(AttributeError, match="has no attribute 'ApiClients'"):
        port.ApiClients  # noqa: B018


def test_httpx_is_loaded_by_the_first_http_get_probe_url():
    code = ("from pykubelet.ports.probers import http_url\n"
            "assert str(http_url('HTTP', '127.0.0.1', 8080, 'healthz')) == 'http://127.0.0.1:8080/healthz'")
    assert loaded_after(code) == ["httpx"]


def test_difflib_is_loaded_by_a_misspelled_flag():
    code = ("from pykubelet.cli.config import ConfigurationError, build_configuration\n"
            "try:\n    build_configuration(['--max-podz=3'])\nexcept ConfigurationError as e:\n"
            "    assert 'did you mean --max-pods' in str(e), e\nelse:\n    raise AssertionError('accepted')")
    assert loaded_after(code) == ["difflib"]
