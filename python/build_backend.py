"""The build backend behind pyproject.toml: `pip install .` runs scripts/wheel for its own Python.

PEP 517 asks for build_wheel(); scripts/wheel configures and builds its own
tree (build-wheel/, or $ATOLL_WHEEL_BUILD: a tree already configured, as the
test suite's), bundles the libraries and writes the wheel. It needs no
package from an index, so the backend requires nothing.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def get_requires_for_build_wheel(config_settings=None) -> list:
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    cmd = [str(ROOT / "scripts" / "wheel"), sys.executable, "--out", os.fspath(wheel_directory)]
    if os.environ.get("ATOLL_WHEEL_BUILD"):
        cmd += ["--build", os.environ["ATOLL_WHEEL_BUILD"]]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1]).name
