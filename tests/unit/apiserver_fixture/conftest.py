from tests.support.apiserver.fixtures import apiserver  # noqa: F401 (fixture)
