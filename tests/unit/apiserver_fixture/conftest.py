from tests.support.apiserver.fixtures import apiserver  # noqa: F401 (fixture)

import pytest


@pytest.fixture
def node1(apiserver):  # noqa: F811
    """A client with the node identity system:node:node1."""
    return apiserver.client("system:node:node1")
