"""The ``atoll`` and ``atoll-node`` commands of an installed wheel (its console scripts).

The wheel carries the atoll command (built without libtorch) and atoll-node in
``atoll/_bin/``; pip puts these two entry points on PATH, and each becomes the
real program (exec), so signals and exit statuses are atoll's own.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

BIN = Path(__file__).resolve().parent / "_bin"


def _exec(name: str, env: dict) -> None:
    program = BIN / name
    if not program.exists():
        sys.exit(f"atoll: this atoll package has no {name} command: it was not installed from a wheel "
                 "(from a source build, run build/atoll; scripts/wheel makes a wheel)")
    os.execve(program, [name, *sys.argv[1:]], env)


def main() -> None:
    """``atoll``: the atoll command (``atoll --help``)."""
    _exec("atoll", dict(os.environ))


def node() -> None:
    """``atoll-node``: one node of a run from the environment; its atoll is the wheel's unless ATOLL_BIN says."""
    env = dict(os.environ)
    env.setdefault("ATOLL_BIN", str(BIN / "atoll"))
    _exec("atoll-node", env)
