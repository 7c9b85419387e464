"""`pip install .` (the README's first command) installs only the packages pyproject.toml
lists; a folder made a package and not listed there works in the editable install the
tests use and is missing from a real one."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed_for_installation():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for name, folder in setuptools["package-dir"].items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            relative = init.parent.relative_to(base)
            found.add(".".join([name, *relative.parts]))
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set(), "listed in pyproject.toml but not a package folder"


def test_the_installed_version_is_the_one_messages_version_holds():
    # pyproject.toml takes the version from messages/version.py, which the daemon imports
    # instead of importlib.metadata (0.75 MB): the two must never disagree.
    from importlib.metadata import version

    from pykubelet.messages.version import VERSION

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["dynamic"]["version"] == {"attr": "pykubelet.messages.version.VERSION"}
    assert version("pykubelet") == VERSION


def test_the_daemon_does_not_import_importlib_metadata():
    import subprocess
    import sys

    code = "import sys, pykubelet.cli.run; print('importlib.metadata' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
