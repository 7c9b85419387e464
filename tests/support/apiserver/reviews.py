"""TokenReview and SubjectAccessReview (POST only, cluster-scoped, answered and not stored),
the two APIs a kubelet delegates its own API's authentication and authorization to.

TokenReview: a token registered with add_token, or a service account token this server
issued and whose account (and bound pod, secret or node) still exist with the same uid,
is authenticated; anything else is not, with status.error set as kube-apiserver sets it.

SubjectAccessReview: the answer this server's own authorizer gives (system:masters may do
anything; node identities get the Node authorizer's rules), plus grants the test sets
(RBAC-like: users or groups, verbs, resources such as "nodes/proxy"). KubeApi.review
drives both; authz.authorize decides who may create them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from tests.support.apiserver import authz, errors, tokens
from tests.support.apiserver.pki import MASTERS_GROUP, Identity
from tests.support.apiserver.store import ResourceType

AUTHENTICATION_GROUP = "authentication.k8s.io"
AUTHORIZATION_GROUP = "authorization.k8s.io"
TOKEN_REVIEW = ResourceType("tokenreviews", AUTHENTICATION_GROUP, "v1", "TokenReview", False)
SUBJECT_ACCESS_REVIEW = ResourceType("subjectaccessreviews", AUTHORIZATION_GROUP, "v1", "SubjectAccessReview", False)
TYPES = {(rt.group, rt.name): rt for rt in (TOKEN_REVIEW, SUBJECT_ACCESS_REVIEW)}

AUTHENTICATED_GROUP = "system:authenticated"
SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"
INVALID_TOKEN = "invalid bearer token"
INVALIDATED = "service account token has been invalidated"
EXPIRED = "service account token has expired"


def review_type(group: str, resource: str) -> ResourceType | None:
    return TYPES.get((group, resource))


# --- TokenReview -----------------------------------------------------------------------------


def _with_authenticated(groups: tuple[str, ...] | list[str]) -> list[str]:
    return list(groups) if AUTHENTICATED_GROUP in groups else [*groups, AUTHENTICATED_GROUP]


def review_token(body: dict[str, Any], registered: dict[str, Identity], issuer: tokens.TokenIssuer,
                 get: Callable[[str, str, str], dict[str, Any] | None]) -> dict[str, Any]:
    """The answered TokenReview. `get(resource, namespace, name)` reads the store."""
    spec = body.get("spec") or {}
    token = spec.get("token") or ""
    if not token:
        raise errors.bad_request("token is required for TokenReview in authentication")
    wanted = list(spec.get("audiences") or ())
    status: dict[str, Any] = {"user": {}}
    if token in registered:
        who = registered[token]
        status = {"authenticated": True, "user": {"username": who.user, "groups": _with_authenticated(who.groups)},
                  "audiences": wanted or list(tokens.API_AUDIENCES)}
    else:
        claims = issuer.verify(token)
        if claims is None:
            status["error"] = INVALID_TOKEN
        else:
            status.update(_service_account(claims, wanted, get))
    answer = {"kind": "TokenReview", "apiVersion": f"{AUTHENTICATION_GROUP}/v1", "metadata": {},
              "spec": spec, "status": status}
    return answer


def _service_account(claims: dict[str, Any], wanted: list[str],
                     get: Callable[[str, str, str], dict[str, Any] | None]) -> dict[str, Any]:
    audiences = [a for a in (wanted or tokens.API_AUDIENCES) if a in (claims.get("aud") or ())]
    if claims.get("iss") != tokens.ISSUER or not audiences:
        return {"error": INVALID_TOKEN}
    now = time.time()
    if claims.get("exp", 0) < now or claims.get("nbf", 0) > now + 60:
        return {"error": f"[{INVALID_TOKEN}, {EXPIRED}]"}
    private = claims.get("kubernetes.io") or {}
    namespace = private.get("namespace", "")
    account = private.get("serviceaccount") or {}
    extra: dict[str, list[str]] = {}
    for resource, key in (("serviceaccounts", "serviceaccount"), ("pods", "pod"), ("secrets", "secret"), ("nodes", "node")):
        ref = private.get(key)
        if ref is None:
            continue
        checked = key != "node" or "pod" not in private  # a pod's node is informational only
        stored = get(resource, "" if resource == "nodes" else namespace, ref.get("name", "")) if checked else None
        if checked and (stored is None or (ref.get("uid") and stored["metadata"].get("uid") != ref["uid"])):
            return {"error": f"[{INVALID_TOKEN}, {INVALIDATED}]"}
        if key in ("pod", "node"):
            extra[f"authentication.kubernetes.io/{key}-name"] = [ref["name"]]
            if ref.get("uid"):
                extra[f"authentication.kubernetes.io/{key}-uid"] = [ref["uid"]]
    if claims.get("jti"):
        extra["authentication.kubernetes.io/credential-id"] = [f"JTI={claims['jti']}"]
    user = {"username": claims.get("sub", ""), "uid": account.get("uid", ""),
            "groups": [SERVICE_ACCOUNTS_GROUP, f"{SERVICE_ACCOUNTS_GROUP}:{namespace}", AUTHENTICATED_GROUP]}
    if extra:
        user["extra"] = dict(sorted(extra.items()))
    return {"authenticated": True, "user": user, "audiences": audiences}


# --- SubjectAccessReview ----------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    """An RBAC-like rule with its binding: who (users, groups), which verbs, which resources
    ("nodes/proxy", "nodes/*", "nodes", "*") in which API groups; "*" matches anything."""

    name: str
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ("",)

    @classmethod
    def from_json(cls, body: dict[str, Any], default_name: str) -> Grant:
        def strings(key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
            value = body.get(key, default)
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{key}: expected a list of strings, got {value!r}")
            return tuple(value)

        grant = cls(str(body.get("name") or default_name), strings("users"), strings("groups"),
                    strings("verbs"), strings("resources"), strings("api_groups", ("",)))
        if not (grant.users or grant.groups):
            raise ValueError("a grant needs users or groups")
        if not grant.verbs or not grant.resources:
            raise ValueError("a grant needs verbs and resources")
        return grant

    def subject(self, user: str, groups: tuple[str, ...]) -> str | None:
        """How the binding names this requester ('User "alice"'), or None."""
        if user in self.users:
            return f'User "{user}"'
        group = next((g for g in self.groups if g in groups), None)
        return f'Group "{group}"' if group is not None else None

    def allows(self, verb: str, group: str, resource: str, subresource: str) -> bool:
        wanted = f"{resource}/{subresource}" if subresource else resource
        resources = any(r in ("*", wanted) or (subresource and r == f"{resource}/*") for r in self.resources)
        return (any(v in ("*", verb) for v in self.verbs) and any(g in ("*", group) for g in self.api_groups)
                and resources)


def validate_access_review(body: dict[str, Any]) -> None:
    """ValidateSubjectAccessReview: one of resource or non-resource attributes; a user or groups."""
    spec = body.get("spec") or {}
    causes = []
    if ("resourceAttributes" in spec) == ("nonResourceAttributes" in spec):
        causes.append(errors.invalid_value("spec", spec.get("nonResourceAttributes"),
                                           "exactly one of nonResourceAttributes or resourceAttributes must be specified"))
    if not spec.get("user") and not spec.get("groups"):
        causes.append(errors.invalid_value("spec.user", spec.get("user", ""), "at least one of user or group must be specified"))
    if causes:
        raise errors.invalid("SubjectAccessReview", "", AUTHORIZATION_GROUP, causes)


def review_access(body: dict[str, Any], grants: list[Grant],
                  server_allows: Callable[[Identity, authz.RequestInfo], bool]) -> dict[str, Any]:
    """The answered SubjectAccessReview: allowed by this server's authorizer (server_allows),
    else by the first matching grant (reason as RBAC words it), else not allowed."""
    validate_access_review(body)
    spec = body["spec"]
    who = Identity(spec.get("user") or "", tuple(spec.get("groups") or ()))
    status: dict[str, Any] = {"allowed": False}
    attributes = spec.get("resourceAttributes")
    if attributes is not None:
        ri = authz.RequestInfo(attributes.get("verb", ""), attributes.get("group", ""), attributes.get("version", ""),
                               attributes.get("resource", ""), attributes.get("subresource", ""),
                               attributes.get("namespace", ""), attributes.get("name", ""))
        if server_allows(who, ri):
            status = {"allowed": True}
        else:
            for grant in grants:
                subject = grant.subject(who.user, who.groups)
                if subject and grant.allows(ri.verb, ri.group, ri.resource, ri.subresource):
                    status = {"allowed": True, "reason": f'RBAC: allowed by ClusterRoleBinding "{grant.name}" of '
                                                         f'ClusterRole "{grant.name}" to {subject}'}
                    break
    elif MASTERS_GROUP in who.groups:
        status = {"allowed": True}
    return {"kind": "SubjectAccessReview", "apiVersion": f"{AUTHORIZATION_GROUP}/v1", "metadata": {},
            "spec": spec, "status": status}
