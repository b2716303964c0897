"""How the pipeline starts its own processes (`python -m reference_pipeline.<module>`: the service,
the downstream, the load workers): with this checkout on the import path, whatever the caller's
working folder."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env
