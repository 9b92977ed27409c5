#!/usr/bin/python3
"""Runs docs/models.md's "An island, end to end" as written: two islands of two ranks under torchrun.

Usage: island_walkthrough_test.py REPO_ROOT BUILD_DIR

The files of the first walk-through (model.py, topology.toml) and the island's (island.py) are written
into a scratch folder and the island section's shell commands run there, one by one, with the build's
`atoll` on PATH and its Python package importable; the ports 7070, 29400 and 29401 are swapped for free
ones, the budget for one no run reaches (the test ends the run with SIGINT). Once both islands were merged, rank 1 of island 1 is killed with SIGKILL: its torchrun must start
the island again. Then:
  - every process exits 0 (each torchrun too: its island came back and ended with the run);
  - the report counts one restart, of learner 1, with its re-integration time, and no departure;
  - each island is one learner whose batch is both ranks' (8 + 8) and whose tokens are both ranks'.
Exit 0 pass, 1 fail, 77 skipped (no torch for this Python).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from walkthrough_test import UNENDING, fail, free_port, run_commands, scratch, wait_for, walkthrough  # noqa: E402

SECTION = "### An island, end to end"


def rank_of(torchrun: subprocess.Popen, rank: int) -> int:
    """The pid of a torchrun's worker of local rank `rank` (its child with LOCAL_RANK in its environment)."""
    children = []
    for task in Path(f"/proc/{torchrun.pid}/task").iterdir():
        children += (task / "children").read_text().split()
    for pid in children:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"LOCAL_RANK={rank}".encode() in env:
            return int(pid)
    raise RuntimeError(f"torchrun {torchrun.pid} has no worker of local rank {rank} among {children}")


def main() -> int:
    repo, build = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"skipped: torch is not installed for {sys.executable} (scripts/setup installs python3-torch)")
        return 77
    page = repo / "docs" / "models.md"
    files, _ = walkthrough(page)
    island_files, commands = walkthrough(page, SECTION)
    files.update(island_files)
    for needed in ("model.py", "topology.toml", "island.py"):
        if needed not in files:
            fail(f"the walk-throughs have no {needed} block")
    ports = {"7070": free_port(), "29400": free_port(), "29401": free_port(), **UNENDING}
    work, logs, env = scratch(build, files, ports, "atoll-island-walkthrough-")
    if not shutil.which("torchrun", path=env["PATH"]):
        fail("no torchrun on PATH (Debian's python3-torch ships /usr/bin/torchrun)")
    background, _ = run_commands(commands, work, env, logs, ports)
    syncer = next(c for c in background if c.startswith("atoll syncer"))
    islands = [c for c in background if c.startswith("torchrun")]
    if len(islands) != 2 or not all("--id 1" in c or "--id 0" in c for c in islands):
        fail(f"expected two torchrun commands, of --id 0 and --id 1: {islands}")
    island1 = next(c for c in islands if "--id 1" in c)
    syncer_log, running = background[syncer][1], background[syncer][0]

    # Both islands merged, then a rank of island 1 killed: torchrun starts the whole island again.
    wait_for(syncer_log, r"learner [01] registered", 120, count=2, logs=logs, alive=running)
    wait_for(syncer_log, r"rounds [1-9]", 120, logs=logs, alive=running)
    killed = time.monotonic()
    os.kill(rank_of(background[island1][0], 1), signal.SIGKILL)
    wait_for(syncer_log, r"learner 1 registered", 120, count=2, logs=logs, alive=running)
    back = time.monotonic() - killed
    wait_for(syncer_log, r"learner 1 is merged again", 120, logs=logs, alive=running)
    running.send_signal(signal.SIGINT)  # the run's end, in order: both islands are told it is over

    for command, (proc, _) in background.items():
        try:
            status = proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            fail(f"`{command}` did not end within 300 s", logs)
        if status != 0:
            fail(f"`{command}` exited {status}", logs)

    report = json.loads((work / "report.json").read_text())
    learners = {l["id"]: l for l in report["per_learner"]}
    if report["restarts"] != 1 or learners[1]["restarts"] != 1 or len(report["reintegration_seconds"]) != 1:
        fail(f"restarts {report['restarts']}, learner 1's {learners[1]['restarts']}, re-integrations "
             f"{report['reintegration_seconds']}: expected one restart of island 1", logs)
    if report["departures"] or report["joins"]:
        fail(f"{report['departures']} departures and {report['joins']} joins: an island's restart is neither", logs)
    for i, l in learners.items():
        # batch_size: both ranks' 8; tokens: steps of 2 ranks x 8 windows x 64 bytes.
        if l["batch_size"] != 16 or l["merged"] == 0 or l["last_incarnation_tokens"] % 1024:
            fail(f"island {i}: {l}: expected a batch of 16, merges, tokens in steps of 1024", logs)
    said = [m for log in logs.glob("*.log") for m in re.findall(r"step\(\) ([0-9.]+) ms", log.read_text())]
    print(f"island walk-through: {report['tokens']} tokens, {report['rounds']} rounds; island 1 registered again "
          f"{back:.1f} s after its rank 1 was killed, re-integrated in {report['reintegration_seconds'][0]:.3f} s; "
          f"handing a step took {', '.join(said)} ms on the ranks that ended with the run")
    subprocess.run(["rm", "-rf", str(work)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
