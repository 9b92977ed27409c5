"""Islands: many ranks of torch.distributed (gloo, on the CPU) training one replica as one atoll learner.

Each island is a real `torchrun` (torch's own launcher and supervisor, --max_restarts) of two ranks of
island_rank.py against a real `atoll syncer` process. Two islands of two ranks each train together:
replicated (DDP) or split by hand among the ranks (the stand-in for FSDP, through the same code as a
DTensor). Then a rank of one island is killed with SIGKILL, or stopped with SIGSTOP, mid-run: the island
fails as a whole within its group's timeout, torchrun starts it again, and it comes back under the same
id, welcomed with the global model and a peer's moments, while the other island trains on. Every wait
is a bounded poll on what the processes wrote.

The plans that say which rank holds and sends which values are pure functions, tested first against a
brute-force reference.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import atoll
from atoll.island import Holding, check_holdings, pack, share, unpack
from conftest import Syncer, free_port, tiny_model, wait_until

RANK = Path(__file__).with_name("island_rank.py")
TIMEOUT = 20.0  # the islands' group timeout, seconds: how long a rank waits for a hung peer (or, restarted, for
#               the rendezvous store: 8 s was too short with every core busy)


# -- the plans, alone

def random_layout(rng: random.Random):
    """Tensors, a fragment plan over them (pieces, some tensors split in blocks as a syncer in shards
    does), and a split of every tensor among `ranks` ranks (uneven blocks, empty ones, replicated ones)."""
    numels = [rng.randint(1, 40) for _ in range(rng.randint(1, 6))]
    pieces = []
    for t, n in enumerate(numels):
        at = 0
        while at < n:  # blocks of a tensor, as the sharded syncer's plan cuts large ones
            k = rng.randint(1, n - at)
            pieces.append((t, at, k))
            at += k
    rng.shuffle(pieces)
    fragments = [[] for _ in range(rng.randint(1, 4))]
    for t, start, k in pieces:
        fragment = rng.choice(fragments)
        fragment.append((t, sum(p[2] for p in fragment), k, start))
    ranks = rng.randint(1, 4)
    holdings = [[] for _ in range(ranks)]
    for n in numels:
        if rng.random() < 0.3:
            for r in range(ranks):
                holdings[r].append(Holding(0, n, True))
            continue
        cuts = sorted(rng.randint(0, n) for _ in range(ranks - 1))
        for r, (lo, hi) in enumerate(zip([0] + cuts, cuts + [n])):
            holdings[r].append(Holding(lo, hi - lo, False))
    return numels, fragments, holdings


@pytest.mark.parametrize("seed", range(40))
def test_gathering_every_ranks_part_gives_each_fragment_whole_and_spreading_gives_each_rank_its_part(seed):
    rng = random.Random(seed)
    numels, fragments, holdings = random_layout(rng)
    check_holdings([f"t{i}" for i in range(len(numels))], numels, holdings)
    full_tensors = [torch.randn(n) for n in numels]
    sizes = [sum(p[2] for p in f) for f in fragments]
    vectors = list(range(len(fragments)))
    # The reference: each fragment's values straight from the full tensors.
    expected = [torch.cat([full_tensors[t][s:s + k] for t, _, k, s in f]) if f else torch.empty(0) for f in fragments]
    # A rank's local tensors: its block of each, or the whole tensor.
    local = [[full_tensors[t][h.start:h.start + h.count] for t, h in enumerate(hs)] for hs in holdings]
    # Reading: every rank packs what it holds from its local tensors; unpacking all of them is each fragment.
    gathered = [torch.full((n,), float("nan")) for n in sizes]
    for r, hs in enumerate(holdings):
        plan = share(fragments, hs, reading=True, leader=r == 0)
        part = torch.cat([local[r][t][o:o + k] for f in plan.pieces for t, _, k, o in f] or [torch.empty(0)])
        assert part.numel() == sum(plan.sizes)
        unpack(gathered, plan, vectors, part)
    for got, want in zip(gathered, expected):
        assert torch.equal(got, want)
    # Writing: every rank gets exactly the values of what it holds (replicated: all of it).
    for r, hs in enumerate(holdings):
        plan = share(fragments, hs, reading=False, leader=r == 0)
        part = torch.empty(sum(plan.sizes))
        pack(expected, plan, vectors, part)
        at = 0
        for f, n in zip(plan.pieces, plan.sizes):
            for t, o, k, start in f:
                assert torch.equal(part[at + o:at + o + k], local[r][t][start:start + k])
            at += n
    # Every value of a sharded tensor is read by exactly one rank; a replicated one by the leader.
    reads = sum(share(fragments, hs, reading=True, leader=r == 0).sizes[v] for r, hs in enumerate(holdings)
                for v in vectors)
    assert reads == sum(sizes)


def test_a_split_that_misses_or_overlaps_values_is_refused_naming_the_tensor():
    with pytest.raises(ValueError, match=r"w \(10 values\) is not split exactly: values \[4, 6\) are held by no"):
        check_holdings(["w"], [10], [[Holding(0, 4, False)], [Holding(6, 4, False)]])
    with pytest.raises(ValueError, match=r"w \(10 values\).*rank 1's block \[3, 10\) overlaps"):
        check_holdings(["w"], [10], [[Holding(0, 4, False)], [Holding(3, 7, False)]])
    with pytest.raises(ValueError, match=r"w is replicated on rank\(s\) \[0\] but sharded"):
        check_holdings(["w"], [10], [[Holding(0, 10, True)], [Holding(0, 10, False)]])


# -- ranks that disagree, a group that waits too long: refused at construction, on every rank

AGREE = """
import datetime, os, sys, torch, torch.distributed as dist, atoll
timeout = float(os.environ["GROUP_TIMEOUT"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
rank = dist.get_rank()
model = torch.nn.Linear(4, 2 + (rank if os.environ.get("OTHER_MODEL") else 0))
learner_id = rank if os.environ.get("OTHER_ID") else 0
try:
    atoll.Learner(model, "127.0.0.1:9", id=learner_id, token="x" * 32, group=dist.group.WORLD, wait_seconds=1)
except Exception as e:
    print(f"rank {rank}: {type(e).__name__}: {e}", flush=True)
"""


def ranks_say(tmp_path: Path, **env: str) -> list:
    """What each of 2 ranks (plain processes, env:// rendezvous) printed when making its learner."""
    script = tmp_path / "agree.py"
    script.write_text(AGREE)
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env={**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                              "RANK": str(r), "WORLD_SIZE": "2", "GROUP_TIMEOUT": "20", **env})
             for r in range(2)]
    return [p.communicate(timeout=120)[0] for p in procs]


def test_ranks_with_another_id_or_model_are_refused_naming_the_rank_and_the_difference(tmp_path: Path):
    for said in ranks_say(tmp_path, OTHER_ID="1"):
        assert "ValueError: island rank 1 disagrees with its leader (rank 0) on the id: 1 against 0" in said, said
    for said in ranks_say(tmp_path, OTHER_MODEL="1"):
        assert ("ValueError: island rank 1 trains another model than its leader (rank 0): its parameter 0 is "
                "weight [3, 4] where the leader's is weight [2, 4]") in said, said


def test_a_group_that_lets_a_rank_wait_half_an_hour_is_refused(tmp_path: Path):
    for said in ranks_say(tmp_path, GROUP_TIMEOUT="1800"):
        assert "lets a rank wait 1800 s for the others" in said and "timeout=datetime.timedelta" in said, said


# -- islands against a syncer

def island_topology(model_file: Path) -> str:
    # A budget no run reaches (the default, 4M tokens, a fast machine could spend while a rank hangs): a
    # test ends the run (SIGINT to the syncer, an orderly end) once what it waits for happened.
    return "\n".join([
        'mode = "decoupled"', "tokens = 1000000000000", "[model]", 'kind = "external"', f'path = "{model_file}"',
        "[outer]", "fragments = 2", "sync_every = 4", "[checkpoint]", 'dir = ""',
        "[[learners]]", "batch_size = 32", "[[learners]]", "batch_size = 32"]) + "\n"


class Island:
    """`torchrun` of 2 ranks of island_rank.py as learner `id` of `syncer` (a Syncer, or every shard's
    "HOST:PORT" comma-separated and the token file), its files in `out`."""

    def __init__(self, syncer, learner_id: int, out: Path, mode: str, tokens=(16, 24),
                 check_welcome: bool = False, token_file: Path = None) -> None:
        address = syncer if isinstance(syncer, str) else syncer.address
        token_file = token_file if token_file is not None else syncer.token_file
        self.id, self.out = learner_id, out
        logs = out / f"torchrun-{learner_id}"
        logs.mkdir()
        self.log = out / f"torchrun-{learner_id}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
             "--max_restarts", "3", "--monitor_interval", "1", "--redirects", "2", "--tee", "2",
             "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}", "--rdzv_id",
             f"island-{learner_id}", "--log_dir", str(logs), str(RANK), "--syncer", address,
             "--token-file", str(token_file), "--id", str(learner_id), "--mode", mode, "--out", str(out),
             "--timeout", str(TIMEOUT), "--pause", "0.01", "--tokens-per-rank", *map(str, tokens)] +
            (["--check-welcome"] if check_welcome else []),
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT, start_new_session=True)

    def lines(self, rank: int) -> list:
        """What the rank wrote so far, a line per step (a line being written is not yet there)."""
        path = self.out / f"island-{self.id}-rank-{rank}.jsonl"
        return [json.loads(l) for l in path.read_text().split("\n")[:-1]] if path.exists() else []

    def steps(self, rank: int, restart: int = 0) -> list:
        return [l for l in self.lines(rank) if "step" in l and l["restart"] == restart]

    def restart(self) -> int:
        """Which start of the island torchrun is on (0 the first), as rank 0's last step says."""
        return max((l["restart"] for l in self.lines(0) if "step" in l), default=0)

    def pid(self, rank: int) -> int:
        """The process of `rank` now (torchrun's worker running island_rank.py), as its last step says."""
        return self.lines(rank)[-1]["pid"]

    def wait(self, seconds: float) -> int:
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise AssertionError(f"island {self.id} did not end within {seconds} s: "
                                 f"{self.log.read_text()[-3000:]}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.atoll"
    atoll.save_model(tiny_model(), path, "mlp 8-16-3")
    return path


def run_islands(tmp_path: Path, model_file: Path, mode: str, fault=None):
    """Two islands of 2 ranks against a syncer; `fault(islands, syncer)` runs once both trained a while.
    The run is ended once each island took 100 steps with merges on the syncer after the fault (or from
    the start). Returns (report, islands, syncer)."""
    syncer = Syncer(tmp_path, island_topology(model_file), "--save-model", str(tmp_path / "final.atoll"),
                    metrics=True)
    islands = []
    try:
        islands = [Island(syncer, 0, tmp_path, mode, check_welcome=mode == "sharded")]
        if mode == "sharded":  # island 0 checks its welcome before anyone trains
            wait_until(lambda: any("welcome_matches" in l for l in islands[0].lines(0)), 120,
                       "island 0's check of its welcome", lambda: islands[0].log.read_text()[-2000:])
            # Island 1 comes once the global model moved on: a newcomer then, welcomed with island 0's moments
            # (sooner, on a slow machine, it would be welcomed with the initial model alone).
            wait_until(lambda: syncer.status()["rounds"] > 0, 120, "a round merged",
                       lambda: islands[0].log.read_text()[-2000:])
        islands.append(Island(syncer, 1, tmp_path, mode))
        merged = lambda: [l["merged"] for l in syncer.status()["per_learner"]]  # noqa: E731
        if fault is not None:
            fault(islands, syncer)
        start = merged()
        # On the island's latest start: torchrun may start it more than once when, on cores shared with other
        # tests, a restarted rank misses its peer's deadline; each start must then be counted (check_run).
        wait_until(lambda: all(len(i.steps(0, i.restart())) > 100 for i in islands) and
                   all(m > s + 3 for m, s in zip(merged(), start)), 180,
                   "both islands at 100 steps, merged 4 more times each",
                   lambda: dict(merged=merged(), at_the_fault=start, starts=[i.restart() for i in islands],
                                steps=[len(i.steps(0, i.restart())) for i in islands],
                                island_0=islands[0].log.read_text()[-1500:]))
        syncer.proc.send_signal(signal.SIGINT)  # ends the run in order: the islands are told it is over
        for island in islands:
            assert island.wait(120) == 0, f"island {island.id} failed: {island.log.read_text()[-3000:]}"
        assert syncer.proc.wait(timeout=60) == 0, syncer.log.read_text()[-3000:]
    finally:
        for island in islands:
            island.kill()
        syncer.stop()
    return json.loads(syncer.report.read_text()), islands, syncer


def check_run(report: dict, islands: list, replicated_whole: bool) -> None:
    """What every island run holds: both islands merged; versions never went down and none a learner
    adopted is lost; nobody departed; each island's tokens are its ranks' sum; the ranks agree."""
    assert report["version_decreases"] == 0
    assert all(f >= a for f, a in zip(report["final_versions"], report["max_adopted_versions"])), report
    assert report["departures"] == 0 and report["joins"] == 0, report
    for island, learner in zip(islands, report["per_learner"]):
        assert learner["merged"] > 0, learner
        # The island's tokens are both ranks' (16 + 24 a step): the leader's alone would be 16 a step.
        ranks = [island.steps(r, island.restart()) for r in range(2)]  # its last start
        assert len(ranks[0]) == len(ranks[1]) > 20, [len(r) for r in ranks]
        assert learner["last_incarnation_tokens"] % 40 == 0 and learner["last_incarnation_tokens"] > 16 * len(
            ranks[0]), (learner, len(ranks[0]))
        # Every rank's replicated values are bit-identical at every step, adoptions included.
        for a, b in zip(*ranks):
            assert a["step"] == b["step"] and a["hash"] == b["hash"], (island.id, a, b)
        leader = ranks[0]
        assert leader[-1]["versions"] >= 3, leader[-1]  # adopted a few versions of every fragment
        assert not leader[-1]["going"] and leader[-1]["welcomed"]


def final_loss_falls(tmp_path: Path) -> None:
    """The syncer's final model classifies the task far better than the initial one."""
    model = tiny_model()
    w = torch.randn(8, 3, generator=torch.Generator().manual_seed(42))
    x = torch.randn(512, 8, generator=torch.Generator().manual_seed(7))
    y = (x @ w).argmax(1)
    before = torch.nn.functional.cross_entropy(model(x), y).item()
    atoll.load_model(model, tmp_path / "final.atoll")
    after = torch.nn.functional.cross_entropy(model(x), y).item()
    assert after < 0.6 * before, (before, after)


def test_two_ddp_islands_train_as_two_learners_and_their_ranks_stay_bit_identical(tmp_path, model_file):
    report, islands, _ = run_islands(tmp_path, model_file, "ddp")
    check_run(report, islands, True)
    assert report["restarts"] == 0
    final_loss_falls(tmp_path)


def test_two_sharded_islands_gather_and_spread_each_ranks_part(tmp_path, model_file):
    report, islands, syncer = run_islands(tmp_path, model_file, "sharded")
    check_run(report, islands, False)
    # After the welcome, the blocks the ranks hold put together are the global model exactly.
    assert [l["welcome_matches"] for l in islands[0].lines(0) if "welcome_matches" in l] == [True]
    # Island 1 came after island 0 trained: welcomed with its moments, gathered from island 0's ranks and
    # spread to island 1's.
    assert "learner 1 registered (incarnation" in syncer.log.read_text() and "with a peer's moments" in [
        l for l in syncer.log.read_text().splitlines() if "learner 1 registered" in l][0]
    final_loss_falls(tmp_path)


def fail_a_rank(how: int):
    """A fault: once island 0 has been merged, its rank 1 gets signal `how`; island 1 must be merged
    again while island 0 is down, and island 0 must come back (its restart's first step)."""

    def fault(islands, syncer):
        merged = lambda: [l["merged"] for l in syncer.status()["per_learner"]]  # noqa: E731
        wait_until(lambda: len(islands[0].steps(1)) > 50 and min(merged()) > 0, 120,
                   "both islands merged, island 0 at 50 steps", merged)
        victim = islands[0].pid(1)
        before = merged()[1]
        stopped = time.monotonic()
        os.kill(victim, how)
        # The group's timeout, torchrun's 30 s before it SIGKILLs a stopped rank, then two ranks importing torch
        # and meeting again: 46 s alone, and over 100 s on 2 cores shared with other tests' processes.
        wait_until(lambda: islands[0].restart() >= 1, TIMEOUT + 300, "island 0 started again by torchrun",
                   lambda: islands[0].log.read_text()[-1500:], every=0.2)
        fault.back_after = time.monotonic() - stopped
        fault.island_1_merged = merged()[1] - before

    return fault


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "hung"])
def test_a_failed_rank_fails_its_island_which_torchrun_restarts_and_atoll_reintegrates(tmp_path, model_file, how):
    fault = fail_a_rank(how)
    report, islands, syncer = run_islands(tmp_path, model_file, "ddp", fault=fault)
    print(f"island 0 trained again {fault.back_after:.1f} s after its rank 1 got {signal.Signals(how).name}; "
          f"island 1 merged {fault.island_1_merged} pushes meanwhile; re-integration "
          f"{report['reintegration_seconds']} s")
    assert fault.island_1_merged > 0, "the other island was not merged while island 0 was down"
    # Each start of island 0 after the fault is a restart of learner 0 (with its re-integration time), not a
    # departure and a join. Torchrun makes one, or more when a restarted rank missed its peer's deadline (a
    # start that failed before its learner registered is not one).
    starts = islands[0].restart()
    if starts > 1:
        print(f"torchrun started island 0 {starts} times after the fault: {islands[0].log.read_text()[-3000:]}")
    restarts = report["per_learner"][0]["restarts"]
    assert report["restarts"] == restarts and 1 <= restarts <= starts, (starts, report["per_learner"])
    assert report["per_learner"][1]["restarts"] == 0
    assert len(report["reintegration_seconds"]) == restarts, report["reintegration_seconds"]
    check_run(report, islands, True)
    log = syncer.log.read_text()
    assert "departs" not in log and "is released" not in log
    registered = [l for l in log.splitlines() if "learner 0 registered" in l]
    assert len(registered) == restarts + 1 and all("with a peer's moments" in r for r in registered[1:]), registered


def test_an_island_registers_once_with_every_shard_of_a_syncer(tmp_path, model_file):
    """A sharded island against a syncer in 2 shard processes: one learner at each shard, merged by both."""
    from test_sharded_learner import Shard

    topology = tmp_path / "topology.toml"
    topology.write_text(island_topology(model_file) + "[syncer]\nshards = 2\n")
    token_file = tmp_path / "token"
    token_file.write_text(atoll.make_token())
    token_file.chmod(0o600)
    shards, island = [], None
    try:
        shards = [Shard(tmp_path / f"shard-{i}", topology, token_file, i) for i in range(2)]
        island = Island(",".join(s.address for s in shards), 0, tmp_path, "sharded", token_file=token_file)
        wait_until(lambda: len(island.steps(0)) > 50 and all(s.merged()[0] > 3 for s in shards), 180,
                   "the island at 50 steps, merged 4 times by each shard", lambda: [s.merged() for s in shards])
        statuses = [s.stop() for s in shards]  # each ends the run in order and tells the island
        assert island.wait(120) == 0, island.log.read_text()[-3000:]
    finally:
        if island is not None:
            island.kill()
        for s in shards:
            s.stop()
    assert statuses == [0, 0], [s.log.read_text()[-2000:] for s in shards]
    for s in shards:
        log = s.log.read_text()
        assert log.count("learner 0 registered") == 1, log[-3000:]  # once, by its leader
        learner = json.loads(s.report.read_text())["per_learner"][0]
        assert learner["merged"] > 0 and learner["batch_size"] == 32, (s.shard, learner)
        assert learner["last_incarnation_tokens"] % 40 == 0, learner
