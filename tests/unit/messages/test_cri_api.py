"""messages/cri_api: the CRI's protobuf messages without grpcio, and one module for them
whichever way they are imported first."""

from __future__ import annotations

import subprocess
import sys

_CHECK = """
import sys
from pykubelet.messages.cri_api import api_pb2
assert "grpc" not in sys.modules, "loading the CRI messages imported grpcio"
assert api_pb2.VersionRequest(version="0.1.0").SerializeToString() == b"\\n\\x050.1.0"
from cri_api.v1 import api_pb2 as by_package, api_pb2_grpc  # the tests' fake runtimes do this
assert by_package is api_pb2 and api_pb2_grpc.RuntimeServiceStub
print("ok")
"""

_PACKAGE_FIRST = """
from cri_api.v1 import api_pb2 as by_package
from pykubelet.messages.cri_api import api_pb2
assert by_package is api_pb2
print("ok")
"""


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_messages_load_without_grpcio_and_the_package_reuses_them() -> None:
    assert run(_CHECK) == "ok"


def test_the_package_imported_first_gives_the_same_module() -> None:
    assert run(_PACKAGE_FIRST) == "ok"
