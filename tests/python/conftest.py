"""What the Python test files share: the atoll command and package, and a syncer in a real process.

CTest runs each file with PYTHONPATH at the build's python/ folder and $ATOLL at
the atoll command (tests/CMakeLists.txt). Every wait is bounded.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/setup installs it)")
import atoll  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ATOLL = os.environ.get("ATOLL", str(REPO / "build" / "atoll"))
os.environ.setdefault("ATOLL_DATA_DIR", str(REPO / "data"))  # for every process a test starts


def speeches_present() -> bool:
    """The State of the Union speeches are there (scripts/setup fetches them)."""
    return any((Path(os.environ["ATOLL_DATA_DIR"]) / "sotu").glob("*.txt"))


needs_speeches = pytest.mark.skipif(not speeches_present(),
                                    reason="the State of the Union speeches are missing (scripts/setup)")


def tiny_model(seed: int = 0) -> "torch.nn.Module":
    """An MLP 8-16-3: two fragments' worth of tensors, trained in milliseconds."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def tiny_topology(model_file: Path, **extra: str) -> str:
    lines = [f'mode = "decoupled"', f"tokens = {extra.pop('tokens', 100000000)}",
             "[model]", 'kind = "external"', f'path = "{model_file}"',
             "[outer]", "fragments = 2", f"sync_every = {extra.pop('sync_every', 4)}",
             "[checkpoint]", 'dir = ""']
    if "max_learners" in extra:  # open slots for learners without an id
        lines += ["[membership]", f"max_learners = {extra.pop('max_learners')}"]
    lines += ["[[learners]]", "[[learners]]"]
    return "\n".join(lines) + "\n"


def wait_until(condition: Callable[[], Any], seconds: float, what: str, shown: Callable[[], Any] = lambda: None,
               every: float = 0.05) -> Any:
    """Polls `condition` every `every` seconds until it is true and returns its value; fails after
    `seconds`, naming `what` was awaited and showing `shown()`, the state that did not get there."""
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}; now: {shown()}"
        time.sleep(every)
    return value


def free_port() -> int:
    """A loopback port free now (for --metrics, which takes no port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Syncer:
    """`atoll syncer` in its own process, on a free loopback port, with a fresh token.

    metrics=True: it serves its live status too (--metrics), which status() reads.
    """

    def __init__(self, workdir: Path, topology: str, *args: str, metrics: bool = False) -> None:
        self.workdir = workdir
        (workdir / "topology.toml").write_text(topology)
        self.token_file = workdir / "token"
        self.token_file.write_text(atoll.make_token())
        self.token_file.chmod(0o600)
        self.token = self.token_file.read_text()
        port_file = workdir / "port"
        self.log = workdir / "syncer.log"
        self.report = workdir / "report.json"
        self.metrics = free_port() if metrics else None
        if self.metrics is not None:
            args = ("--metrics", f"127.0.0.1:{self.metrics}", *args)
        self.proc = subprocess.Popen(
            [ATOLL, "syncer", str(workdir / "topology.toml"), "--listen", "127.0.0.1:0", "--port-file",
             str(port_file), "--token-file", str(self.token_file), "--report", str(self.report), "-q", "-v", *args],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        # A bound against a hang, not a pace: a large model's syncer reads and copies it before it listens,
        # which a loaded CI machine makes several times slower.
        deadline = time.monotonic() + 120
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.proc.poll() is None, f"atoll syncer ended: {self.log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "atoll syncer did not listen within 120 s"
            time.sleep(0.05)
        self.address = "127.0.0.1:" + port_file.read_text().strip()

    def status(self) -> dict:
        """The run as the syncer sees it now (its status page's JSON: rounds, versions, per_learner[i]["merged"])."""
        assert self.metrics is not None, "status() needs Syncer(..., metrics=True)"
        request = urllib.request.Request(f"http://127.0.0.1:{self.metrics}/status.json",
                                         headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.load(r)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.atoll"
    atoll.save_model(tiny_model(), path, "mlp 8-16-3")
    return path


@pytest.fixture
def syncer(tmp_path: Path, model_file: Path):
    s = Syncer(tmp_path, tiny_topology(model_file))
    yield s
    s.stop()


@pytest.fixture
def metered_syncer(tmp_path: Path, model_file: Path):
    """The syncer fixture's, serving its live status too (Syncer.status())."""
    s = Syncer(tmp_path, tiny_topology(model_file), metrics=True)
    yield s
    s.stop()


def train(learner: "atoll.Learner", model: "torch.nn.Module", opt, steps: int, seed: int = 0) -> int:
    """Takes up to `steps` steps of a fixed task on `model`; returns the steps taken before the run ended."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(8, 3, generator=torch.Generator().manual_seed(42))
    for k in range(steps):
        x = torch.randn(16, 8, generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), (x @ w).argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if not learner.step(tokens=16, loss=loss.item()):
            return k + 1
    return steps


sys.path.insert(0, str(Path(__file__).parent))
