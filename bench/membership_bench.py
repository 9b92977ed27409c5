#!/usr/bin/python3
"""Open membership, measured: what learners that join and leave a running job buy.

Three configurations of examples/topologies/scavenging.toml (the default transformer on the
State of the Union speeches; two fixed learners, up to four more in open slots, every learner
at speed 0.5 so that four fill this machine's two cores: each learner is half a core of its
own, as separate machines would be), each over several seeds:

  fixed   the two fixed learners alone
  join    two more join at 25% of `fixed`'s wall time and leave in order at 50% of it (when
          the run has trained about 75% of its tokens, if they double its rate)
  spot    four spot learners join at the start, are preempted at random (mean lifetime 40 s,
          5 s notice) and replaced 5-15 s later, while the two fixed learners train

For each: wall time, tokens, tokens per second, held-out bits per byte, goodput (against the
learner time allocated: members' time as members), joins, departures and the plan's verdict
(versions never decrease, no adopted version lost, finite, min goodput), as mean +- sd.

    bench/membership_bench.py [--seeds 1 2 3] [--tokens 2000000] [--out atoll-out/bench/membership]

Run it alone on an idle machine (about 25 minutes with the defaults).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOPOLOGY = REPO / "examples" / "topologies" / "scavenging.toml"

INVARIANTS = """
[invariants]
versions_never_decrease = true
no_adopted_version_lost = true
finite = true
min_goodput = 0.5
"""


def join_plan(topology: Path, join_at: float, leave_at: float) -> str:
    return f"""name = "two learners join at 25% and leave at 75% of the tokens"
topology = "{topology}"
[[fault]]
kind = "join"
at = {join_at:.1f}
count = 2
speed = 0.5
batch_size = 8
[[fault]]
kind = "leave"
at = {leave_at:.1f}
learner = 2
[[fault]]
kind = "leave"
at = {leave_at:.1f}
learner = 3
""" + INVARIANTS


def spot_plan(topology: Path) -> str:
    return f"""name = "four spot learners preempted at random beside two fixed ones"
topology = "{topology}"
[[fault]]
kind = "join"
at = 0.5
count = 4
speed = 0.5
batch_size = 8
[random]
kind = "preempt"
mtbf_seconds = 40
grace = 5
recovery = "uniform"
recovery_min = 5
recovery_max = 15
""" + INVARIANTS


def run(atoll: str, out: Path, name: str, seed: int, tokens: int, plan: Path | None) -> dict:
    report = out / f"{name}-seed{seed}.json"
    cmd = [atoll, "run", str(TOPOLOGY), "--set", f"seed={seed}", "--set", f"tokens={tokens}", "--report", str(report)]
    if plan is not None:
        cmd += ["--faults", str(plan), "--tape", str(out / f"{name}-seed{seed}.tape.jsonl")]
    started = time.monotonic()
    with open(out / f"{name}-seed{seed}.log", "w") as log:
        status = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    r = json.loads(report.read_text())
    row = {"config": name, "seed": seed, "exit": status, "invariants_hold": status == 0,
           "wall_seconds": r["wall_seconds"], "tokens": r["tokens"], "tokens_per_second": r["tokens_per_second"],
           "bits_per_byte": r["eval"]["bits_per_byte"], "goodput": r["goodput"], "joins": r["joins"],
           "departures": r["departures"], "learners": r["learners"],
           "allocated_learner_seconds": r["allocated_learner_seconds"]}
    print(f"  {name} seed {seed}: {row['wall_seconds']:.1f} s, {row['tokens']} tokens, "
          f"{row['bits_per_byte']:.4f} bits/byte, goodput {row['goodput']:.3f}, joins {row['joins']}, "
          f"departures {row['departures']}, exit {status} ({time.monotonic() - started:.0f} s)", flush=True)
    return row


def summary(rows: list) -> dict:
    out = {}
    for key in ("wall_seconds", "tokens", "tokens_per_second", "bits_per_byte", "goodput", "joins", "departures"):
        xs = [float(r[key]) for r in rows]
        out[key] = {"mean": statistics.fmean(xs), "sd": statistics.stdev(xs) if len(xs) > 1 else 0.0}
    out["invariants_hold"] = sum(r["invariants_hold"] for r in rows)
    out["runs"] = len(rows)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--atoll", default=str(REPO / "build" / "atoll"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--tokens", type=int, default=2_000_000)
    ap.add_argument("--out", default=str(REPO / "atoll-out" / "bench" / "membership"))
    ap.add_argument("--configs", nargs="+", default=["fixed", "join", "spot"], choices=["fixed", "join", "spot"])
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: dict = {c: [] for c in a.configs}
    if "fixed" in a.configs:
        print("fixed: two learners", flush=True)
        rows["fixed"] = [run(a.atoll, out, "fixed", s, a.tokens, None) for s in a.seeds]
    wall = statistics.fmean(r["wall_seconds"] for r in rows["fixed"]) if rows.get("fixed") else 200.0
    if "join" in a.configs:
        plan = out / "join.toml"
        plan.write_text(join_plan(TOPOLOGY, 0.25 * wall, 0.5 * wall))
        print(f"join: two more join at {0.25 * wall:.1f} s and leave at {0.5 * wall:.1f} s", flush=True)
        rows["join"] = [run(a.atoll, out, "join", s, a.tokens, plan) for s in a.seeds]
    if "spot" in a.configs:
        plan = out / "spot.toml"
        plan.write_text(spot_plan(TOPOLOGY))
        print("spot: four spot learners, mean lifetime 40 s, beside two fixed", flush=True)
        rows["spot"] = [run(a.atoll, out, "spot", s, a.tokens, plan) for s in a.seeds]
    result = {"topology": str(TOPOLOGY), "tokens": a.tokens, "seeds": a.seeds,
              "configs": {c: {"runs": rs, "summary": summary(rs)} for c, rs in rows.items() if rs}}
    (out / "membership_bench.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"\n{'config':8} {'wall s':>14} {'tokens/s':>14} {'bits/byte':>16} {'goodput':>14} {'joins':>6} "
          f"{'departures':>10} {'invariants':>10}")
    for c, v in result["configs"].items():
        s = v["summary"]
        f = lambda k, d: f"{s[k]['mean']:.{d}f} +- {s[k]['sd']:.{d}f}"  # noqa: E731
        print(f"{c:8} {f('wall_seconds', 1):>14} {f('tokens_per_second', 0):>14} {f('bits_per_byte', 4):>16} "
              f"{f('goodput', 3):>14} {s['joins']['mean']:>6.1f} {s['departures']['mean']:>10.1f} "
              f"{s['invariants_hold']:>4}/{s['runs']}")
    print(f"\nwritten: {out / 'membership_bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
