"""A Kubernetes API server for tests: HTTPS on 127.0.0.1 with client-certificate (and token)
authentication, the Node authorizer and NodeRestriction for node identities, in-memory
pods, nodes, leases, events, namespaces, configmaps, secrets, services and serviceaccounts
with list/watch, TokenRequest, TokenReview and SubjectAccessReview, and faults on demand.

It runs as its own process (`python -m tests.support.apiserver`); LocalApiServer starts and
drives it, and the `apiserver` pytest fixture (tests/support/apiserver/fixtures.py) gives
one per test. See README.md beside this file for what it implements and what it does not.
"""

__all__ = ["ApiServerError", "Identity", "LocalApiServer", "RequestRecord"]


def __getattr__(name: str):
    # Lazy, so that the server process (python -m tests.support.apiserver) does not import
    # the test-side handle and its client libraries.
    if name in ("ApiServerError", "LocalApiServer"):
        from tests.support.apiserver import handle

        return getattr(handle, name)
    if name == "Identity":
        from tests.support.apiserver.pki import Identity

        return Identity
    if name == "RequestRecord":
        from tests.support.apiserver.faults import RequestRecord

        return RequestRecord
    raise AttributeError(name)
