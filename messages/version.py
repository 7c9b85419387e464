"""pykubelet's own version: the one place it is written (pyproject.toml reads it from here
at build time), for what names the kubelet on the wire and in its logs: the start-up line,
nodeInfo.kubeletVersion, the API client's User-Agent, the embedded runtime's VersionResponse.
Imported instead of importlib.metadata, which costs the daemon 0.75 MB (docs/performance.md)."""

VERSION = "0.1.0"
