"""scripts/gpu_bench, dry-run on the CPU with tiny sizes, so that the GPU bench cannot rot between GPU runs:
every phase runs (one learner, profiled, overlap off, no moments, four learners with one killed and
relaunched, the plain loop to the four learners' tokens), the figures land in the JSON and the table,
and a bad command line is refused with status 2."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO, needs_speeches

BENCH = REPO / "scripts" / "gpu_bench"


def test_help_says_what_it_measures_and_bad_flags_exit_2() -> None:
    r = subprocess.run([sys.executable, str(BENCH), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "the plain loop" in r.stdout and "SIGKILL" in r.stdout, r.stdout
    for bad, says in ((["--phases", "warp"], "unknown warp"), (["--device", "tpu"], "expected cuda"),
                      (["--batch", "6"], "multiple of 4"), (["--wheel", "/nowhere.whl"], "no wheel at"),
                      (["--profile", "-1"], "--profile -1")):
        r = subprocess.run([sys.executable, str(BENCH)] + bad, capture_output=True, text=True)
        assert r.returncode == 2 and says in r.stderr, (bad, r.stderr)


@needs_speeches
def test_every_phase_runs_on_the_cpu_and_its_figures_are_recorded(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(BENCH), "--device", "cpu", "--tiny", "--profile", "2", "--workdir",
                        str(tmp_path / "work"), "--out", str(out)], capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stdout + r.stderr
    figures = json.loads(out.read_text())
    assert figures["machine"]["python"] and figures["machine"]["torch"] and figures["model"]["parameters"] > 0
    assert not [p for p, v in figures["phases"].items() if "error" in v], figures["phases"]
    s = figures["summary"]
    for name in ("plain", "learner", "sync"):
        assert s[name]["tokens_per_second"] > 0, (name, s[name])
    for name in ("learner", "sync", "no-moments"):
        assert 0 < s[name]["ratio_to_plain"] and 0 < s[name]["step_call_share"] < 1, s[name]
        assert set(s[name]["parts_ms"]) == {"request", "adopt", "read", "wait", "hand", "evaluate"}, s[name]
        assert 0 < s[name]["step_call_ms_median"] <= s[name]["step_call_ms_p90"] <= s[name]["step_call_ms_max"], s[name]
        profile = figures["phases"][name]["learners"][0]["profile"]
        assert "Self CPU" in Path(profile["table"]).read_text() and Path(profile["trace"]).stat().st_size > 0, profile
    assert 0 < s["plain"]["queue_ms"] <= s["plain"]["alone_ms"], s["plain"]
    # Without the moments, the syncer's checkpoints hold the model alone.
    assert 0 < s["no-moments"]["checkpoint_bytes"] < s["learner"]["checkpoint_bytes"], s
    four = s["four"]
    assert four["restarts"] >= 1 and four["reintegration_seconds"], four
    assert {"registration", "reintegrated", "first_merge"} <= set(four["victim"]), four["victim"]
    assert four["killed_learner_last_incarnation_tokens"] > 0 and four["held_out_final"] is True, four
    quality = s["plain"]["quality"]
    assert quality["tokens"] >= four["tokens"] and quality["bits_per_byte"] > 0, quality
    assert "four learners on one CPU" in r.stdout and "quality at" in r.stdout, r.stdout
