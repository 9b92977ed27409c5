"""Topologies, runs and chaos plans scripted from Python, with the same precise errors as files."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

import atoll
from conftest import REPO

SMALL = REPO / "examples" / "topologies" / "chaos_small.toml"


def test_a_topology_from_a_file_a_dict_and_keys_round_trips(tmp_path: Path) -> None:
    default = atoll.Topology()
    assert default["mode"] == "decoupled" and len(default["learners"]) == 4
    t = atoll.Topology({"mode": "dp", "outer": {"quorum": 2}, "learners": [{"speed": 1.0}, {"speed": 0.5}]})
    assert t["mode"] == "dp" and t["outer.quorum"] == 2 and t["learners"][1]["speed"] == 0.5
    assert atoll.Topology(outer__fragments=6)["outer"]["fragments"] == 6
    from_file = atoll.Topology(SMALL)
    assert from_file["model.kind"] == "mlp" and from_file["data"]["kind"] == "synthetic"
    from_file.save(tmp_path / "t.toml")
    assert atoll.Topology(tmp_path / "t.toml") == from_file
    assert atoll.Topology(SMALL).set("seed", 9) != from_file
    assert "Topology(mode='decoupled', model='mlp', learners=4" in repr(from_file)


@pytest.mark.parametrize("make,error,text", [
    (lambda: atoll.Topology({"outer": {"quorm": 2}}), ValueError,
     "set('outer.quorm', 2): outer.quorm: unknown key (did you mean outer.quorum?)"),
    (lambda: atoll.Topology().set("outer.quorum", 9), ValueError, "outer.quorum = 9 exceeds the 4 learners"),
    (lambda: atoll.Topology().set("mode", "fast"), ValueError, "mode"),
    (lambda: atoll.Topology().set("outer.lr", math.inf), ValueError, "outer.lr: inf is not a finite number"),
    (lambda: atoll.Topology().set("seed", object()), TypeError, "no TOML form"),
    (lambda: atoll.Topology(42), TypeError, "a file path or a dict"),
    (lambda: atoll.Topology("/no/such/topology.toml"), FileNotFoundError, "/no/such/topology.toml"),
    (lambda: atoll.Topology()["outer.nothing"], KeyError, "outer.nothing"),
    (lambda: atoll.run({"model": {"kind": "mlp"}}), ValueError, "mlp"),
    (lambda: atoll.chaos(42), TypeError, "plan file"),
    (lambda: atoll.chaos("/no/such/plan.toml"), FileNotFoundError, "/no/such/plan.toml"),
])
def test_bad_topologies_and_plans_are_named(make, error, text) -> None:
    with pytest.raises(error) as e:
        make()
    assert text in str(e.value), str(e.value)


def test_a_run_shows_itself_while_it_runs_and_reports_at_the_end(tmp_path: Path) -> None:
    topology = atoll.Topology(SMALL).set("checkpoint.dir", "").set("tokens", 200000)
    run = atoll.run(topology, save_model=str(tmp_path / "final.atoll"))
    view = run.view()
    assert {"tokens", "goodput", "learners"} <= set(view)
    report = run.wait()
    assert report["tokens"] >= 200000 and report["rounds"] > 0 and math.isfinite(report["eval"]["loss"])
    assert run.finished and len(run.parameters()) > 0 and run.parameters().format == "f"
    assert (tmp_path / "final.atoll").exists()


def test_a_chaos_plan_whose_invariant_breaks_says_which(tmp_path: Path) -> None:
    plan = tmp_path / "impossible.toml"
    plan.write_text(f"""name = "an impossible goodput"
topology = "{SMALL}"
seconds = 2
[[fault]]
kind = "kill"
at = 0.5
learner = 0
recover_after = 0.5
[invariants]
min_goodput = 1.0  # the killed learner's unpushed steps are lost: goodput stays below its alive share
""")
    verdict = atoll.chaos(plan, atoll.Topology(SMALL).set("checkpoint.dir", ""))
    assert not verdict and not verdict.ok
    assert any("goodput" in v for v in verdict.violations), verdict.violations
    assert "an impossible goodput" in verdict.table
    assert verdict.results[0]["faults_injected"] == 1
