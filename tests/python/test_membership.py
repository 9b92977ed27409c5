"""Open membership from Python: a learner without an id is given a free open slot,
trains, leaves in order while the run goes on, and a learner scripted into a run
in this process joins and leaves the same way (docs/design.md section 6)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

import atoll
from conftest import Syncer, tiny_model, tiny_topology, train, wait_until


def test_a_learner_without_an_id_joins_an_open_slot_then_leaves_in_order(tmp_path: Path, model_file: Path) -> None:
    syncer = Syncer(tmp_path, tiny_topology(model_file, max_learners=3))
    try:
        models = [tiny_model(1), tiny_model(2), tiny_model(3)]
        opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in models]
        fixed = [atoll.Learner(models[i], syncer.address, id=i, token=syncer.token, optimizer=opts[i],
                               wait_seconds=10) for i in (0, 1)]
        joiner = atoll.Learner(models[2], syncer.address, token=syncer.token, optimizer=opts[2], batch_size=32,
                               wait_seconds=10)
        assert joiner.id == 2  # the lowest (and only) open slot
        # Every slot is held now: the next learner without an id is refused, saying why.
        with pytest.raises(atoll.Refused, match=r"\(full\): all 1 open slots are taken"):
            atoll.Learner(tiny_model(4), syncer.address, token=syncer.token, wait_seconds=10)
        learners = fixed + [joiner]
        assert all(l.wait_welcome(10) for l in learners)
        for _ in range(80):
            for l, m, o in zip(learners, models, opts):
                train(l, m, o, 1)
            time.sleep(0.005)
        # It leaves while the others train on: its last progress is merged, then it is closed.
        steps_before = joiner.state.steps
        report = joiner.leave(30)
        assert report is not None and steps_before > 0
        with pytest.raises(ValueError, match="closed"):
            joiner.step(tokens=1)
        for _ in range(40):
            for l, m, o in zip(fixed, models, opts):
                train(l, m, o, 1)
            time.sleep(0.005)
        log = syncer.log.read_text()
        assert "learner 2 departs: Learner.leave()" in log, log[-3000:]
        assert "learner 2 is down" not in log  # a departure, not a failure
        # Its slot is free again: the next learner without an id takes it.
        again = atoll.Learner(tiny_model(5), syncer.address, token=syncer.token, wait_seconds=10)
        assert again.id == 2 and again.wait_welcome(10)
        again.close()
        assert [l.close() for l in fixed] != [None, None]
    finally:
        assert syncer.stop() == 0
    report = json.loads(syncer.report.read_text())
    slot = report["per_learner"][2]
    assert slot["merged"] > 0 and slot["departures"] == 1, slot
    assert report["joins"] == 2 and report["departures"] == 1, (report["joins"], report["departures"])


def test_a_run_in_this_process_takes_newcomers_and_lets_them_leave(tmp_path: Path) -> None:
    path = tmp_path / "open.toml"
    path.write_text('tokens = 100000000\n[model]\nkind = "mlp"\nhidden = [16]\n'
                    '[data]\nkind = "synthetic"\nfeatures = 8\nclasses = 3\nexamples = 2048\n'
                    '[outer]\nfragments = 2\nsync_every = 8\n[checkpoint]\ndir = ""\n[membership]\nmax_learners = 3\n'
                    '[[learners]]\nspeed = 0.2\nbatch_size = 8\n[[learners]]\nspeed = 0.2\nbatch_size = 8\n')
    topology = atoll.Topology(path)
    with atoll.run(topology, seconds=600) as run:  # stopped below, once the newcomer has left
        newcomer = run.add_learner(speed=0.2, batch_size=16)
        assert newcomer == 2
        with pytest.raises(atoll.Refused, match="full"):
            run.add_learner()

        def slot(view: dict) -> dict:
            return view["per_learner"][newcomer] if len(view["per_learner"]) > newcomer else {}

        # It leaves once the syncer merged some of its progress.
        wait_until(lambda: slot(run.view()).get("merged", 0) > 0, 120, "the newcomer merged",
                   lambda: slot(run.view()))
        assert run.leave_learner(newcomer, drain_seconds=10)
        departed = wait_until(lambda: [e for e in run.view()["events"] if e["kind"] == "departed"], 120,
                              "a departure among the run's events", lambda: run.view()["events"])
        assert departed[0]["learner"] == 2, departed
        run.stop()
        report = run.wait()
    assert report["joins"] == 1 and report["departures"] == 1
    assert report["per_learner"][2]["merged"] > 0, report["per_learner"][2]
