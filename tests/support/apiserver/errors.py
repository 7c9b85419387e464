"""metav1.Status errors as kube-apiserver writes them: one exception type carrying the
HTTP code, the reason and the details, and builders named after apimachinery's
errors.New* helpers so the messages read the same as the real server's."""

from __future__ import annotations

from typing import Any

REASON_BY_CODE = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else REASON_BY_CODE.get(code, "")
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        return status_object(self.code, self.message, self.reason, self.details)


def status_object(code: int, message: str, reason: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details:
        status["details"] = details
    status["code"] = code
    return status


def qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _details(resource: str, group: str, name: str | None, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = resource
    details.update(extra)
    return details


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(404, f'{qualified(resource, group)} "{name}" not found', details=_details(resource, group, name))


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{qualified(resource, group)} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(resource, group, name),
    )


def conflict(resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        reason="Conflict",
        details=_details(resource, group, name),
    )


MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def forbidden(resource: str, group: str, name: str | None, why: str) -> ApiError:
    target = f'{qualified(resource, group)} "{name}"' if name else qualified(resource, group)
    return ApiError(403, f"{target} is forbidden: {why}", details=_details(resource, group, name))


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized")


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def gone(message: str) -> ApiError:
    return ApiError(410, message, reason="Expired")


def method_not_allowed(method: str) -> ApiError:
    return ApiError(405, f"the server does not allow this method on the requested resource ({method})")


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, f'the body of the request was in an unknown format - accepted media types include: '
                         f'application/json-patch+json, application/merge-patch+json, '
                         f'application/strategic-merge-patch+json (got "{content_type}")')


def internal_error(message: str) -> ApiError:
    return ApiError(
        500,
        f"Internal error occurred: {message}",
        details={"causes": [{"message": message}]},
    )


def invalid(kind: str, name: str, group: str, causes: list[dict[str, str]]) -> ApiError:
    """422 Invalid with one cause per field, as field.ErrorList.ToAggregate() words it."""
    summary = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    joined = summary[0] if len(summary) == 1 else "[" + ", ".join(summary) + "]"
    details: dict[str, Any] = {"name": name} if name else {}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = causes
    return ApiError(422, f'{kind}{"." + group if group else ""} "{name}" is invalid: {joined}', details=details)


def field_cause(reason: str, field: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}


def required(field: str) -> dict[str, str]:
    return field_cause("FieldValueRequired", field, "Required value")


def invalid_value(field: str, value: Any, detail: str) -> dict[str, str]:
    return field_cause("FieldValueInvalid", field, f"Invalid value: {_go_value(value)}: {detail}")


def not_supported(field: str, value: Any, supported: list[str]) -> dict[str, str]:
    choices = ", ".join(f'"{s}"' for s in supported)
    return field_cause("FieldValueNotSupported", field, f"Unsupported value: {_go_value(value)}: supported values: {choices}")


def forbidden_field(field: str, detail: str) -> dict[str, str]:
    return field_cause("FieldValueForbidden", field, f"Forbidden: {detail}")


def duplicate(field: str, value: Any) -> dict[str, str]:
    return field_cause("FieldValueDuplicate", field, f"Duplicate value: {_go_value(value)}")


def _go_value(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "{...}" if isinstance(value, dict) else "[...]"
    return str(value)
