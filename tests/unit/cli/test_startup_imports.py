"""What the daemon's entry point imports: packages it needs only in some configurations
stay out of a standalone start, where they would hold memory for nothing
(docs/performance.md, "110 pods at rest"). Their lazy paths are tested where they live."""

from __future__ import annotations

import json
import subprocess
import sys

# Loaded where they are needed: cryptography by the child that makes a self-signed
# certificate (ports/serving_cert.py) and with a clientCAFile (actors/server/auth.py).
LAZY = ("cryptography",)

_LOADED = """
import json, sys
import pykubelet.cli.run
import pykubelet.actors.root
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by_the_entry_point() -> set[str]:
    done = subprocess.run([sys.executable, "-c", _LOADED], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout))


def test_the_daemon_entry_point_does_not_import_what_only_some_configurations_need():
    loaded = loaded_by_the_entry_point()
    assert "pykubelet.actors.root" in loaded and "grpc" in loaded  # the check sees the real imports
    assert sorted(m for m in loaded if m.split(".")[0] in LAZY) == []
