"""The one YAML loader for what operators write (the KubeletConfiguration file, static pod
manifests, kubeconfigs): safe_load (libyaml's when there), except that a key given twice is
an error and timestamps stay strings, as with the Go kubelet's YAML-to-JSON
(sigs.k8s.io/yaml). Callers word the errors for their own input."""

from __future__ import annotations

from typing import Any

import yaml

_MERGE = "tag:yaml.org,2002:merge"


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping gives `key` twice: first at line `first_line`, again at `line` (1-based)."""

    def __init__(self, key: str, first_line: int, node: yaml.Node) -> None:
        super().__init__(None, None, f'key "{key}" given twice', node.start_mark)
        self.key, self.first_line, self.line = key, first_line, node.start_mark.line + 1


class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """See the module docstring."""


def _mapping_without_duplicate_keys(loader: Any, node: yaml.MappingNode) -> Any:
    seen: dict[str, int] = {}
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE:
            if key_node.value in seen:
                raise DuplicateKey(key_node.value, seen[key_node.value], key_node)
            seen[key_node.value] = key_node.start_mark.line + 1
    data: dict = {}
    yield data
    data.update(loader.construct_mapping(node))


StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))
StrictLoader.add_constructor("tag:yaml.org,2002:map", _mapping_without_duplicate_keys)


def load(data: bytes | str) -> Any:
    """The one document in data (None when empty). Raises yaml.YAMLError (DuplicateKey
    for a key given twice) or RecursionError for a document nested too deeply."""
    return yaml.load(data, Loader=StrictLoader)  # noqa: S506 - a SafeLoader


def load_all(data: bytes | str) -> list[Any]:
    """Every non-empty document in data."""
    return [d for d in yaml.load_all(data, Loader=StrictLoader) if d is not None]  # noqa: S506
