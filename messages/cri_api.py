"""The CRI's wire types: runtime.v1's protobuf messages (`api_pb2`), as the PyPI package
container-runtime-interface-api generates them, loaded without that package's __init__.

The package's __init__ also imports its grpcio stubs, and with them grpcio, which holds
10.9 MB resident that the daemon has no use for: its CRI port speaks gRPC itself
(ports/grpc_client). So the module file is loaded here under its own name,
cri_api.v1.api_pb2; code that imports cri_api later (the tests' fake runtimes) gets this
same module from sys.modules, and protobuf's descriptor pool sees the file once.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_NAME = "cri_api.v1.api_pb2"


def _load() -> ModuleType:
    loaded = sys.modules.get(_NAME)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("cri_api")  # finds it without running its __init__
    if package is None or not package.submodule_search_locations:
        raise ImportError(
            "the CRI API messages are missing: install container-runtime-interface-api "
            "(pip install -e . installs it)"
        )
    path = Path(package.submodule_search_locations[0]) / "v1" / "api_pb2.py"
    spec = importlib.util.spec_from_file_location(_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the CRI API messages from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_NAME]
        raise
    return module


api_pb2 = _load()

__all__ = ["api_pb2"]
