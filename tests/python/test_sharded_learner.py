"""Python learners against a syncer in 2 shards (docs/design.md, "A sharded syncer").

Two `atoll syncer --shard i/2` processes, each on its own port with its own
report and live status, and three atoll.Learner in this process joining both
(``syncer="HOST0:PORT0,HOST1:PORT1"``, shard 0 first): two with ids and one
without, which shard 0 gives the open slot 2. Each learner is welcomed by
both shards, trains a PyTorch loop, and pushes each fragment to its owner:
the run is ended once both shards merged pushes of all three (polled on each
shard's status, bounded), and each shard's report must then show merged
pushes of every learner, for its own fragment only.
"""
from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import torch

import atoll
from conftest import ATOLL, free_port, tiny_model, tiny_topology, train, wait_until

SHARDS = 2


class Shard:
    """`atoll syncer --shard i/S` in its own process, its files in `workdir`, with the run's token."""

    def __init__(self, workdir: Path, topology: Path, token_file: Path, shard: int) -> None:
        workdir.mkdir()
        self.shard = shard
        self.log = workdir / "syncer.log"
        self.report = workdir / "report.json"
        self.token = token_file.read_text()
        self.metrics = free_port()
        port_file = workdir / "port"
        self.proc = subprocess.Popen(
            [ATOLL, "syncer", str(topology), "--shard", f"{shard}/{SHARDS}", "--listen", "127.0.0.1:0",
             "--port-file", str(port_file), "--token-file", str(token_file), "--report", str(self.report),
             "--metrics", f"127.0.0.1:{self.metrics}", "-q", "-v"],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        wait_until(lambda: self.proc.poll() is not None or (port_file.exists() and port_file.read_text().strip()),
                   30, f"shard {shard} listening")
        assert self.proc.poll() is None, f"shard {shard} ended: {self.log.read_text()[-2000:]}"
        self.address = "127.0.0.1:" + port_file.read_text().strip()

    def status(self) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{self.metrics}/status.json",
                                         headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.load(r)

    def merged(self) -> list:
        """Merged pushes per learner, as this shard's live status has them."""
        return [l["merged"] for l in self.status()["per_learner"]]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def test_python_learners_train_against_two_shards(tmp_path: Path, model_file: Path) -> None:
    topology = tmp_path / "topology.toml"
    topology.write_text(tiny_topology(model_file, max_learners=3) + f"[syncer]\nshards = {SHARDS}\n")
    token_file = tmp_path / "token"
    token_file.write_text(atoll.make_token())
    token_file.chmod(0o600)
    token = token_file.read_text()
    shards = []
    learners = []
    try:
        for i in range(SHARDS):
            shards.append(Shard(tmp_path / f"shard-{i}", topology, token_file, i))
        join = ",".join(s.address for s in shards)
        models = [tiny_model(1), tiny_model(2), tiny_model(3)]
        opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in models]
        for i, m, o in zip((0, 1, None), models, opts):  # the topology and the open slot come from shard 0
            learners.append(atoll.Learner(m, join, id=i, token=token, optimizer=o, wait_seconds=10))
        assert learners[2].id == 2  # the open slot, given by shard 0
        assert all(l.wait_welcome(10) for l in learners), [l.state for l in learners]

        def all_merged() -> bool:
            return all(len(m) == 3 and min(m) > 0 for m in (s.merged() for s in shards))

        deadline = time.monotonic() + 120
        while not all_merged():
            assert time.monotonic() < deadline, f"not within 120 s: every learner merged at both shards; now: " \
                                                f"{[s.merged() for s in shards]}"
            for _ in range(20):
                for l, m, o in zip(learners, models, opts):
                    train(l, m, o, 1)
                time.sleep(0.005)
    finally:
        statuses = [s.stop() for s in shards]
        for l in learners:
            l.close()
    assert statuses == [0] * SHARDS, [s.log.read_text()[-2000:] for s in shards]
    for s in shards:
        log = s.log.read_text()
        for i in range(3):
            assert f"learner {i} registered" in log, log[-3000:]
        report = json.loads(s.report.read_text())
        merged = {l["id"]: l["merged"] for l in report["per_learner"]}
        assert len(merged) == 3 and min(merged.values()) > 0, (s.shard, merged)
        assert report["joins"] == 1, (s.shard, report["joins"])  # the learner without an id
        assert report["version_decreases"] == 0
        # Shard i merged its fragment i, and no other.
        final = report["final_versions"]
        assert final[s.shard] > 0 and all(v == 0 for p, v in enumerate(final) if p != s.shard), (s.shard, final)
