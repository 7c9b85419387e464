"""Pod sources: the file source (--pod-manifest-path) and the http source (--manifest-url).

Each sends pod config (root/pod-config) its full set of pods as SourcePods.
"""

from .file import file_source_actor
from .http import http_source_actor

__all__ = ["file_source_actor", "http_source_actor"]
