"""atoll.Learner against a real `atoll syncer` process: training, refusals, TLS, bad input, the end."""
from __future__ import annotations

import copy
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import atoll
from conftest import ATOLL, REPO, Syncer, tiny_model, tiny_topology, train, wait_until


def join(syncer: Syncer, model, learner_id: int = 0, **kw) -> atoll.Learner:
    kw.setdefault("wait_seconds", 10)
    return atoll.Learner(model, syncer.address, id=learner_id, token=syncer.token, **kw)


# overlap=True: each boundary hands the values copied at the one before, as on a GPU.
@pytest.mark.parametrize("overlap", [False, True], ids=["read_at_the_boundary", "read_a_boundary_late"])
def test_two_learners_train_and_both_are_merged(metered_syncer: Syncer, overlap: bool) -> None:
    syncer = metered_syncer
    models = [tiny_model(1), tiny_model(2)]
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in models]
    evaluator = atoll.Evaluator(tiny_model(), lambda m: {"loss": 0.5, "accuracy": 0.75, "count": 100},
                                every_versions=2)
    learners = [join(syncer, models[0], 0, optimizer=opts[0], evaluator=evaluator, speed=0.5, batch_size=16,
                     overlap=overlap),
                join(syncer, models[1], 1, optimizer=opts[1], overlap=overlap)]
    assert all(l.wait_welcome(10) for l in learners)
    # Both train until learner 0 booked 55 steps and adopted 5 versions of every fragment, and the
    # syncer merged progress of each (a step at a time: how long that takes is the machine's business).
    taken = 0
    last_status: dict = {}

    def trained_and_merged() -> bool:
        nonlocal taken, last_status
        for l, m, o in zip(learners, models, opts):
            train(l, m, o, 1)
        taken += 1
        state = learners[0].state
        if state.steps < 55 or min(state.versions) < 5:
            return False
        last_status = syncer.status()
        return all(l["merged"] > 0 for l in last_status["per_learner"][:2])

    wait_until(trained_and_merged, 120, "learner 0 at 55 steps and 5 versions, both learners merged",
               lambda: (taken, learners[0].state, [l["merged"] for l in last_status.get("per_learner", [])]),
               every=0.005)
    state = learners[0].state
    assert state.welcomed and not state.over, state
    timings = learners[0].timings
    assert timings["steps"] == taken and all(timings[k] >= 0 for k in timings), timings
    assert timings["evaluate"] > 0, timings
    assert 1 <= timings["allocations"] <= 4, timings  # each ring's two slots, sized once (two fragments of 2)
    params, versions = learners[0].global_parameters()
    assert set(params) == {"0.weight", "0.bias", "2.weight", "2.bias"} and params["0.weight"].shape == (16, 8)
    assert [l.close() for l in learners] != [None, None]
    assert syncer.stop() == 0
    report = json.loads(syncer.report.read_text())
    merged = [l["merged"] for l in report["per_learner"]]
    assert all(m > 0 for m in merged), merged
    assert report["per_learner"][0]["speed"] == 0.5 and report["per_learner"][0]["batch_size"] == 16
    assert report["eval"]["by"].startswith("learner 0's evaluator") and report["eval"]["loss"] == 0.5
    assert len(report["curve"]) == len(evaluator.results) - 1  # the last one, at close, is the learner's own
    assert evaluator.results[-1]["versions"] == learners[0].load_global(tiny_model())


def test_no_buffer_is_made_in_the_loop_and_moments_come_a_boundary_after_they_are_asked(tmp_path: Path,
                                                                                         model_file: Path) -> None:
    # A checkpoint every round asks learner 0 for its AdamW moments again and again, and a newcomer's welcome
    # asks for them too: each is copied at one boundary and handed, lent, at the next, from buffers made
    # with the learner. overlap=True takes the GPU's paths (reads a boundary late) on the CPU.
    topology = tiny_topology(model_file, max_learners=3).replace(
        'dir = ""', f'dir = "{tmp_path / "checkpoints"}"\nevery_rounds = 1\nevery_seconds = 0')
    syncer = Syncer(tmp_path, topology)
    model, other = tiny_model(1), tiny_model(2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    learner = join(syncer, model, 0, optimizer=opt, overlap=True)
    assert learner.wait_welcome(10)
    train(learner, model, opt, 1)
    made = learner.timings["allocations"]
    assert made >= 3, learner.timings  # two read slots and the moments' buffer (no uploads staged on the CPU)
    wait_until(lambda: train(learner, model, opt, 1) and min(learner.state.versions) >= 2, 60,
               "the global model moved on", lambda: learner.state)
    other_opt = torch.optim.AdamW(other.parameters(), lr=1e-2)
    newcomer = atoll.Learner(other, syncer.address, token=syncer.token, optimizer=other_opt, wait_seconds=10)
    # Its welcome waits for learner 0's moments, which come as learner 0 trains.
    wait_until(lambda: train(learner, model, opt, 1) and newcomer.state.welcomed, 60, "the newcomer welcomed",
               lambda: (learner.state, syncer.log.read_text()[-1500:]))
    newcomer.step(tokens=0)  # the global model and the peer's moments into its parameters and optimizer
    for p in other.parameters():
        state = other_opt.state[p]
        assert int(state["step"]) > 0 and state["exp_avg"].abs().sum() > 0 and state["exp_avg_sq"].min() >= 0
    written = lambda: list((tmp_path / "checkpoints").rglob("checkpoint-*.atoll"))  # noqa: E731
    wait_until(lambda: train(learner, model, opt, 1) and len(written()) >= 2, 60, "checkpoints written", written)
    for _ in range(20):
        train(learner, model, opt, 1)
    assert learner.timings["allocations"] == made, learner.timings  # none since the first boundary
    newcomer.close()
    learner.close()
    assert syncer.stop() == 0
    log = syncer.log.read_text()
    assert re.search(r"learner 2 registered \(incarnation \d+, with a peer's moments\)", log), log[-2000:]
    report = json.loads(syncer.report.read_text())
    assert report["moments_handed"] >= 1, report


def test_a_module_of_another_layout_is_refused_naming_both(syncer: Syncer) -> None:
    other = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))
    with pytest.raises(ValueError) as e:
        join(syncer, other)
    assert "this module 0.weight [32, 8], the run's model 0.weight [16, 8]" in str(e.value)


def test_a_wrong_token_an_unknown_id_and_no_syncer_are_refused_with_the_reason(syncer: Syncer,
                                                                              tmp_path: Path) -> None:
    with pytest.raises(atoll.Refused, match="bad_token"):
        atoll.Learner(tiny_model(), syncer.address, id=0, token="x" * 32, wait_seconds=10)
    with pytest.raises(atoll.Refused, match="not in this topology of 2"):
        join(syncer, tiny_model(), 7)
    started = time.monotonic()
    with pytest.raises(atoll.Unavailable, match="no syncer at 127.0.0.1:9"):
        atoll.Learner(tiny_model(), "127.0.0.1:9", id=0, token=syncer.token, wait_seconds=1)
    assert time.monotonic() - started < 15
    os.environ.pop("ATOLL_TOKEN", None)
    with pytest.raises(ValueError, match="ATOLL_TOKEN"):
        atoll.Learner(tiny_model(), syncer.address, id=0, wait_seconds=1)
    short = tmp_path / "short"
    short.write_text("abc")
    with pytest.raises(ValueError, match="at least 16"):
        atoll.Learner(tiny_model(), syncer.address, id=0, token_file=short, wait_seconds=1)


def test_over_tls_only_a_learner_with_the_clusters_certificate_joins(tmp_path: Path, model_file: Path) -> None:
    pki = tmp_path / "pki"
    subprocess.run([ATOLL, "certs", str(pki)], check=True, capture_output=True)
    s = Syncer(tmp_path, tiny_topology(model_file), "--tls-cert", str(pki / "syncer.pem"), "--tls-key",
               str(pki / "syncer.key"), "--tls-ca", str(pki / "ca.pem"))
    try:
        with join(s, tiny_model(), tls_cert=pki / "learner.pem", tls_key=pki / "learner.key",
                  tls_ca=pki / "ca.pem") as learner:
            assert learner.wait_welcome(10)
        # Plain TCP to a TLS door: the handshake fails, retried until the wait ends, then refused (no restart mends it).
        with pytest.raises(atoll.Refused, match="no handshake with the syncer"):
            join(s, tiny_model(), 1, wait_seconds=2)
        with pytest.raises(FileNotFoundError, match="ca.pem.missing"):  # checked before anything is sent
            join(s, tiny_model(), 1, tls_cert=pki / "learner.pem", tls_key=pki / "learner.key",
                 tls_ca=pki / "ca.pem.missing")
    finally:
        assert s.stop() == 0


def test_step_before_the_first_welcome_trains_on_and_the_welcome_sets_the_global_model(
        syncer: Syncer, model_file: Path) -> None:
    model = tiny_model(seed=123)  # not the run's initial weights
    learner = join(syncer, model)
    started = time.monotonic()
    assert all(learner.step(tokens=0) for _ in range(20))  # never waits, never raises
    assert time.monotonic() - started < 1.0
    assert learner.wait_welcome(10)
    learner.step(tokens=0)  # the welcome's values are put in place at a step boundary
    reference = tiny_model()
    atoll.load_model(reference, model_file)
    for (name, a), b in zip(model.named_parameters(), reference.parameters()):
        assert torch.allclose(a, b), name
    assert isinstance(learner.topology, atoll.Topology)  # the run's, as the syncer told it
    learner.close()


def test_a_parameter_that_changes_shape_is_named_and_nothing_is_corrupted(syncer: Syncer) -> None:
    model = tiny_model()
    learner = join(syncer, model)
    assert learner.wait_welcome(10)
    model[2].bias.data = torch.zeros(5)
    with pytest.raises(ValueError, match=r"parameter 2.bias changed its shape from \[3\] to \[5\]"):
        for _ in range(50):  # it is touched when its fragment is next read
            learner.step(tokens=1)
    # What was taken may be half applied: the learner says so rather than train on.
    with pytest.raises(ValueError, match="an earlier step failed"):
        learner.step(tokens=1)
    learner.close()


def test_a_scalar_parameter_round_trips_through_a_run_and_its_final_model(tmp_path: Path) -> None:
    def scaled(seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        m = torch.nn.Linear(4, 2)
        m.scale = torch.nn.Parameter(torch.tensor(2.0))  # rank 0: one value in atoll's layout
        return m

    atoll.save_model(scaled(0), tmp_path / "scaled.atoll")
    s = Syncer(tmp_path, tiny_topology(tmp_path / "scaled.atoll").replace("fragments = 2", "fragments = 1"),
               "--save-model", str(tmp_path / "final.atoll"))
    try:
        model = scaled(1)
        with join(s, model) as learner:
            assert learner.wait_welcome(10)
            learner.step(tokens=0)
            assert float(model.scale) == 2.0  # the file's value, put in place by the welcome
    finally:
        assert s.stop() == 0
    back = scaled(2)
    atoll.load_model(back, tmp_path / "final.atoll")
    assert float(back.scale) == 2.0
    # No learner evaluated: the report and the summary say so, instead of a NaN held-out loss.
    report = json.loads(s.report.read_text())
    assert report["eval"]["loss"] is None and report["eval"]["by"].startswith("none: no learner evaluated"), report
    assert "held-out loss          none: no learner evaluated the model" in s.log.read_text()


def test_a_learner_trains_on_without_its_syncer_then_gives_up(tmp_path: Path, model_file: Path) -> None:
    s = Syncer(tmp_path, tiny_topology(model_file))
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    learner = join(s, model, optimizer=opt, give_up_seconds=2, timeout_seconds=1)
    assert learner.wait_welcome(10)
    s.proc.kill()
    s.proc.wait()
    started = time.monotonic()
    with pytest.raises(atoll.Unavailable, match="no syncer"):
        while time.monotonic() - started < 30:
            train(learner, model, opt, 1)
            time.sleep(0.01)
    assert 1.5 < time.monotonic() - started < 30
    assert learner.close() is None  # it failed: no report


class FakeLearner:
    """What Evaluator.evaluate() reads of a learner: its global model and parameter shapes."""
    _shapes = [tuple(p.shape) for p in tiny_model().parameters()]

    class _native:
        @staticmethod
        def global_parameters():
            return np.concatenate([p.detach().reshape(-1).numpy() for p in tiny_model().parameters()]), [1, 1]


BAD_CALLS = [
    (lambda s: atoll.Learner(42, s.address, id=0, token=s.token), TypeError, "torch.nn.Module"),
    (lambda s: atoll.Learner(tiny_model(), 7070, id=0, token=s.token), TypeError, "HOST:PORT"),
    (lambda s: atoll.Learner(tiny_model(), s.address, id=-1, token=s.token), ValueError, "id must be"),
    (lambda s: atoll.Learner(tiny_model(), s.address, id="0", token=s.token), ValueError, "id must be"),
    (lambda s: atoll.Learner(tiny_model(), s.address, id=0, token=5), TypeError, "token must be a str"),
    (lambda s: atoll.Learner(tiny_model(), s.address, id=0, token=s.token, wait_seconds=-1), ValueError,
     "wait_seconds"),
    (lambda s: atoll.Learner(tiny_model(), "nowhere", id=0, token=s.token), ValueError, "HOST:PORT"),
    (lambda s: atoll.Learner(tiny_model().double(), s.address, id=0, token=s.token), TypeError,
     "parameter 0.weight is torch.float64"),
    (lambda s: atoll.Learner([("w", torch.zeros(4, 4).t())], s.address, id=0, token=s.token), ValueError,
     "parameter w [4, 4] is not contiguous"),
    (lambda s: atoll.Learner([("w", np.zeros(3))], s.address, id=0, token=s.token), TypeError,
     "not a torch.Tensor"),
    (lambda s: atoll.Learner([], s.address, id=0, token=s.token), ValueError, "no parameters"),
    (lambda s: atoll.Learner(tiny_model(), s.address, id=0, token=s.token, optimizer="adam"), TypeError,
     "torch.optim.Optimizer"),
    (lambda s: atoll.Learner(tiny_model(), s.address, id=0, token=s.token, evaluator=print), TypeError,
     "atoll.Evaluator"),
    (lambda s: atoll.Learner(tiny_model(), s.address, id=0, token=s.token, overlap="yes"), TypeError,
     "overlap must be True, False or None"),
    (lambda s: atoll.Evaluator(tiny_model(), 3), TypeError, "fn must be callable"),
    (lambda s: atoll.Evaluator(tiny_model(), print, every_versions=0), ValueError, "every_versions"),
    (lambda s: atoll.Evaluator(tiny_model(), lambda m: {"loss": 1.0, "accuracy": 1.5}).evaluate(FakeLearner()),
     ValueError, "accuracy 1.5"),
    (lambda s: atoll.Evaluator(tiny_model(), lambda m: {"loss": 1.0, "count": 0}).evaluate(FakeLearner()),
     ValueError, "count 0"),
    (lambda s: atoll.Evaluator(tiny_model(), lambda m: {"loss": 1.0, "perplexity": 3}).evaluate(FakeLearner()),
     ValueError, "unknown key 'perplexity'"),
    (lambda s: atoll.save_model(tiny_model(), s.workdir / "token" / "m.atoll"), OSError, "token/m.atoll"),
    (lambda s: atoll.load_model(tiny_model(), s.workdir / "missing.atoll"), FileNotFoundError, "missing.atoll"),
    (lambda s: atoll.load_model(torch.nn.Linear(2, 2), s.workdir / "tiny.atoll"), ValueError,
     "does not fit this module"),
    (lambda s: atoll.set_log_level("loud"), ValueError, "debug, info, warn or error"),
]


@pytest.mark.parametrize("call,error,text", BAD_CALLS, ids=[str(i) for i in range(len(BAD_CALLS))])
def test_bad_input_to_a_public_function_is_an_exception_naming_it(syncer: Syncer, call, error, text) -> None:
    with pytest.raises(error) as e:
        call(syncer)
    assert text in str(e.value), str(e.value)


def test_bad_input_to_step_and_the_evaluator_is_named(syncer: Syncer) -> None:
    model = tiny_model()
    ev_module = tiny_model()
    evaluator = atoll.Evaluator(ev_module, lambda m: float("nan"), every_versions=1)
    with pytest.raises(ValueError, match="the evaluator's module is the one you train"):
        join(syncer, model, evaluator=atoll.Evaluator(model, lambda m: 1.0))
    learner = join(syncer, model, evaluator=evaluator)
    for bad in (-1, "16", 2.5, True):
        with pytest.raises(ValueError, match="tokens must be an int"):
            learner.step(tokens=bad)
    with pytest.raises(ValueError):
        learner.step(tokens=1, loss="high")
    assert learner.wait_welcome(10)
    with pytest.raises(ValueError, match="fn returned the loss nan"):
        learner.step(tokens=1)
    learner.close()
    with pytest.raises(ValueError, match="closed"):
        learner.step(tokens=1)
    assert learner.close() is None  # twice is fine


def test_ctrl_c_in_a_python_learner_leaves_cleanly(syncer: Syncer, tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
import atoll, torch
from conftest import tiny_model, train
model = tiny_model()
opt = torch.optim.AdamW(model.parameters())
try:
    with atoll.Learner(model, {syncer.address!r}, id=1, token_file={str(syncer.token_file)!r}) as learner:
        learner.wait_welcome(10)
        print("training", flush=True)
        while True:
            train(learner, model, opt, 1)
            time.sleep(0.01)
except KeyboardInterrupt:
    print("left", flush=True)
    sys.exit(130)
""")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=dict(os.environ), text=True)
    for line in p.stdout:  # atoll's own log lines come first
        if line.strip() == "training":
            break
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 130, out
    assert "left" in out and "Traceback" not in out, out
    assert syncer.proc.poll() is None  # the run goes on without it


def test_a_learner_that_comes_after_the_run_is_told_it_is_over(tmp_path: Path) -> None:
    atoll.save_model(tiny_model(), tmp_path / "model.atoll")
    topology = tiny_topology(tmp_path / "model.atoll").replace('dir = ""', f'dir = "{tmp_path / "ck"}"')
    syncer = Syncer(tmp_path, topology, "--after-run", "wait", "--run-name", "late", "--seconds", "1")
    deadline = time.monotonic() + 60
    while "telling learners so" not in syncer.log.read_text():
        assert syncer.proc.poll() is None and time.monotonic() < deadline, syncer.log.read_text()[-2000:]
        time.sleep(0.05)
    with pytest.raises(atoll.RunOver, match="the run is over"):
        atoll.Learner(tiny_model(), syncer.address, id=0, token=syncer.token, wait_seconds=10)
    assert syncer.stop() == 0


def test_a_model_whose_welcome_is_larger_than_256_mib_is_welcomed(tmp_path: Path) -> None:
    # 72M parameters: the welcome (the global model, 288 MB in fp32) is over the default message limit.
    class Big(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Parameter(torch.full((36_000_000,), 0.25))
            self.b = torch.nn.Parameter(torch.full((36_000_000,), -0.5))

    path = tmp_path / "big.atoll"
    atoll.save_model(Big(), path, "72M parameters")
    syncer = Syncer(tmp_path, tiny_topology(path))
    try:
        model = Big()
        with torch.no_grad():
            model.a.zero_()
            model.b.zero_()
        learner = join(syncer, model, wait_seconds=60)
        assert learner.wait_welcome(120), syncer.log.read_text()[-2000:]
        learner.step(tokens=0)
        assert float(model.a[-1]) == 0.25 and float(model.b[0]) == -0.5  # the global model, put in place
        learner.close()
    finally:
        syncer.stop()
    assert "malformed" not in syncer.log.read_text()
