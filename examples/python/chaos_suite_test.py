"""A chaos suite as a pytest file: fault plans and faults of your own, each a test, through atoll's Python API.

    PYTHONPATH=build/python python3 -m pytest examples/python/chaos_suite_test.py

Each plan of examples/chaos runs as `atoll chaos` would run it (its faults, its
invariants, its fault-free baseline for the eval-loss bound); the verdict is
true when every invariant held. Faults can come from the test itself, too:
kill a learner of a running topology and check what the report says.
"""
import sys
import time
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1]
try:
    import atoll
except ImportError:  # not installed: the build tree's
    sys.path.insert(0, str(EXAMPLES.parent / "build" / "python"))
    import atoll

SMALL = EXAMPLES / "topologies" / "chaos_small.toml"  # four learners on synthetic data: no files needed


@pytest.mark.parametrize("plan", ["kill_learner", "kill_syncer", "message_faults"])
def test_every_invariant_holds_under_the_plan(plan: str, tmp_path: Path) -> None:
    verdict = atoll.chaos(EXAMPLES / "chaos" / f"{plan}.toml", tape_dir=tmp_path)
    assert verdict, verdict.table + "\n".join(verdict.violations)


def test_a_learner_killed_mid_run_is_back_and_merged(tmp_path: Path) -> None:
    topology = atoll.Topology(SMALL).set("checkpoint.dir", str(tmp_path))
    with atoll.run(topology, seconds=8) as run:  # time enough to come back, on a slow machine too
        time.sleep(1.5)
        assert run.kill_learner(1)
        report = run.wait()
    assert report["per_learner"][1]["restarts"] == 1
    assert max(report["reintegration_seconds"]) < 2.0
    assert all(learner["merged"] > 0 for learner in report["per_learner"])
    assert report["version_decreases"] == 0
