"""The volume manager's parts: the watched ConfigMaps, Secrets and Services pods read
(object_cache), service-account tokens (tokens) and the volumes on the node (manager)."""

from .manager import MountFailed, VolumeManager
from .object_cache import ObjectCache, ObjectKey, ObjectNotReady, ObjectSnapshot, object_watches_actor
from .tokens import TokenError, TokenManager

__all__ = [
    "MountFailed",
    "ObjectCache",
    "ObjectKey",
    "ObjectNotReady",
    "ObjectSnapshot",
    "TokenError",
    "TokenManager",
    "VolumeManager",
    "object_watches_actor",
]
