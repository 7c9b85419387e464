"""The --root-dir, made before the daemon starts: a ConfigurationError names the path, the
OS error and the fix."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigurationError


def prepare_root_dir(path: str) -> Path:
    """mkdir -p the --root-dir; a ConfigurationError names the path, the OS error and the fix."""
    root, where = Path(path), f"--root-dir {path}"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigurationError(f"{where}: exists and is not a directory; choose a directory") from None
    except OSError as error:
        problem = f"cannot create: {error}; choose a writable directory"
        raise ConfigurationError(f"{where}: {problem}") from None
    if not root.is_dir():
        raise ConfigurationError(f"{where}: exists and is not a directory; choose a directory")
    if not os.access(root, os.W_OK | os.X_OK):
        raise ConfigurationError(f"{where}: not writable by this user; choose a writable directory")
    return root
