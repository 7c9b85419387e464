"""API objects as the client hands them out and takes them: decode() from a dict to a typed
msgspec Struct, and the patch types with their content types. Apart from client.py (httpx)
so that the actors that read objects do not load the HTTP stack in standalone mode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

import msgspec

T = TypeVar("T")

PatchType = Literal["strategic", "merge", "json"]
PATCH_CONTENT_TYPES = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
}


def decode(obj: Mapping[str, Any], type_: type[T]) -> T:
    """An API object (dict) as a msgspec Struct; fields the Struct does not model are ignored.

    Read with it; write back the dict, which keeps every field. ValueError names the object.
    """
    try:
        return msgspec.convert(obj, type_)
    except msgspec.ValidationError as exc:
        meta = obj.get("metadata") or {}
        ident = "/".join(p for p in (meta.get("namespace"), meta.get("name")) if p) or "?"
        raise ValueError(f"{obj.get('kind') or type_.__name__} {ident}: cannot decode as "
                         f"{type_.__name__}: {exc}") from None
