"""examples/python/train_lstm.py the way its docstring runs it: the initial weights saved, `atoll syncer`
started by hand, two learner processes (one AdamW, one SGD), the final model evaluated from its file."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, Syncer, needs_speeches

EXAMPLE = REPO / "examples" / "python" / "train_lstm.py"


@needs_speeches
def test_two_lstm_learners_with_different_optimizers_train_one_model(tmp_path: Path) -> None:
    initial, final = tmp_path / "lstm.atoll", tmp_path / "final.atoll"
    subprocess.run([sys.executable, str(EXAMPLE), "--save", str(initial)], check=True)
    topology = (REPO / "examples" / "python" / "lstm.toml").read_text()
    topology = topology.replace("tokens = 400000", "tokens = 60000").replace(
        'path = "atoll-out/lstm/lstm.atoll"', f'path = "{initial}"').replace(
        'dir = "atoll-out/checkpoints"', 'dir = ""')
    syncer = Syncer(tmp_path, topology, "--save-model", str(final))
    learners = [subprocess.Popen([sys.executable, str(EXAMPLE), "--join", syncer.address, "--id", str(i),
                                  "--token-file", str(syncer.token_file), "--optimizer", optimizer],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for i, optimizer in enumerate(["adamw", "sgd"])]
    try:
        for p in learners:
            out, _ = p.communicate(timeout=180)
            assert p.returncode == 0 and "done" in out, out
        assert syncer.proc.wait(timeout=60) == 0
    finally:
        for p in learners:
            p.kill()
        syncer.stop()
    result = subprocess.run([sys.executable, str(EXAMPLE), "--evaluate", str(final)], capture_output=True,
                            text=True, check=True)
    bits = float(re.search(r"held-out bits per byte ([0-9.]+)", result.stdout).group(1))
    assert bits < 6.0, result.stdout  # uniform bytes are 8 bits; it learned
