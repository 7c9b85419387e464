"""pytest fixture for the test API server. Make it visible with
`from tests.support.apiserver.fixtures import apiserver` in a conftest.py.

- apiserver   a LocalApiServer started for the test and stopped at teardown (its process
              ended, its temporary directory with certificates and kubeconfigs removed).
              A traceback in the server's output fails the test at teardown: it is a bug of
              the test server, which otherwise only shows as a 500 to the client.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.apiserver.handle import LocalApiServer

__all__ = ["apiserver"]


@pytest.fixture
def apiserver() -> Iterator[LocalApiServer]:
    server = LocalApiServer().start()
    try:
        yield server
    finally:
        server.stop()
    if errors := server.server_errors():
        pytest.fail(f"the test API server logged errors (a bug in tests/support/apiserver):\n{errors}", pytrace=False)
