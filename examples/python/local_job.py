"""What the Python examples share: finding torch, atoll and the `atoll` command, and running a job here.

Importing this module first makes the examples work from a fresh clone after the
README's two commands:
  - Debian's python3-torch belongs to /usr/bin/python3: a pyenv or venv python3
    first on PATH has no torch, so the calling script re-runs itself there;
  - the atoll package is taken from the build tree (build/python) unless it is
    installed (`cmake --install`).

LocalJob runs a job on this machine the way a cluster engine would: `atoll
syncer` in one process, each learner in a process of its own, and a learner
process that dies of a signal (a kill -9, an OOM) started again, which atoll
re-integrates: it is welcomed with the global model and a peer's moments.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, List, Optional

REPO = Path(__file__).resolve().parents[2]

sys.path.insert(0, str(REPO / "examples" / "torch"))  # gpt.py, and the torch finder the examples share
import torchscript_export  # noqa: E402,F401  (re-runs this script under Debian's python3 when torch is missing)

try:
    import atoll  # noqa: F401  (installed)
except ImportError:
    sys.path.insert(0, os.environ.get("ATOLL_PYTHON_DIR", str(REPO / "build" / "python")))
    try:
        import atoll  # noqa: F401
    except ImportError as e:
        print(f"{os.path.basename(sys.argv[0])}: the atoll module is not built ({e}): run the README's first "
              "command, or set ATOLL_PYTHON_DIR to <build>/python", file=sys.stderr)
        sys.exit(77)

# Exit codes of an example's learner process, which LocalJob acts on.
DONE, FAILED, REFUSED, LOST = 0, 1, 2, 3


def free_port() -> int:
    """A loopback port free now (for a torchrun rendezvous of its own)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def atoll_command() -> str:
    """The `atoll` command: $ATOLL, else the build tree's, else the one on PATH."""
    for candidate in (os.environ.get("ATOLL"), str(REPO / "build" / "atoll"), shutil.which("atoll")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    sys.exit("the atoll command is not built: run the README's first command, or set ATOLL to its path")


class LocalJob:
    """`atoll syncer` and one process per learner on this machine, relaunching learners that die of a signal.

    Everything goes into `workdir`: the cluster token (mode 600), the
    syncer's log, report, plots and final model, each learner's log and pid.
    `command` is the atoll command (default: atoll_command()); `env` the
    processes' environment (default: this one's).
    """

    def __init__(self, workdir: Path, topology: str, learners: int,
                 learner_argv: Callable[[int, str, Path], List[str]], *, max_restarts: int = 3,
                 syncer_args: Optional[List[str]] = None, threads: int = 0, command: str = "",
                 env: Optional[dict] = None, ranks: int = 1) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.topology = self.workdir / "topology.toml"
        self.topology.write_text(topology)
        self.token = self.workdir / "token"
        fd = os.open(self.token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(atoll.make_token())
        self.learners = learners
        self.learner_argv = learner_argv
        self.max_restarts = max_restarts
        self.syncer_args = syncer_args or []
        self.report = self.workdir / "report.json"
        self.final_model = self.workdir / "final.atoll"
        self.restarts = [0] * learners
        # Each learner's (each rank's, with `ranks` per learner) BLAS and OpenMP threads: the cores shared among
        # them, unless given. Their own pools would each take every core, and idle threads spin.
        n = str(threads or max(1, (os.cpu_count() or 1) // (learners * ranks)))
        self.env = dict(env if env is not None else os.environ, OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n)
        self.command = command or atoll_command()
        self._procs: List[Optional[subprocess.Popen]] = [None] * learners
        self._syncer: Optional[subprocess.Popen] = None

    def run(self) -> int:
        """Starts the syncer and the learners, keeps the learners up, and returns the syncer's exit status."""
        port_file = self.workdir / "port"
        port_file.unlink(missing_ok=True)
        log = open(self.workdir / "syncer.log", "w")
        self._syncer = subprocess.Popen(
            [self.command, "syncer", str(self.topology), "--listen", "127.0.0.1:0", "--port-file", str(port_file),
             "--token-file", str(self.token), "--report", str(self.report), "--save-model", str(self.final_model),
             "-q", "-v"] + self.syncer_args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        try:
            deadline = time.monotonic() + 60
            while not port_file.exists() or not port_file.read_text().strip():
                if self._syncer.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"atoll syncer did not start: see {self.workdir / 'syncer.log'}")
                time.sleep(0.05)
            self.address = "127.0.0.1:" + port_file.read_text().strip()
            for i in range(self.learners):
                self._start(i)
            while self._syncer.poll() is None:
                for i, p in enumerate(self._procs):
                    if p is not None and p.poll() is not None and p.returncode < 0:
                        self._relaunch(i, -p.returncode)
                time.sleep(0.1)
            deadline = time.monotonic() + 30  # the learners end once the syncer said so
            for p in self._procs:
                if p is not None:
                    try:
                        p.wait(timeout=max(0.1, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        p.kill()
            return self._syncer.returncode
        except BaseException:
            self.stop()
            raise
        finally:
            log.close()

    def learners_alive(self) -> int:
        """How many learner processes run now (0 before they start, and once all have ended)."""
        return sum(1 for p in self._procs if p is not None and p.poll() is None)

    def pid(self, learner: int) -> Optional[int]:
        """The process id of a learner now (tests kill it)."""
        p = self._procs[learner]
        return p.pid if p is not None and p.poll() is None else None

    def end(self) -> None:
        """Asks the syncer to end the run (SIGINT), as its own end would: it takes the learners' last progress
        and the final evaluation, then writes its report and final model; run() returns once it has."""
        if self._syncer is not None and self._syncer.poll() is None:
            self._syncer.send_signal(signal.SIGINT)

    def stop(self) -> None:
        """Ends the job in order: the syncer stops the run (its report follows), the learners end."""
        if self._syncer is not None and self._syncer.poll() is None:
            self._syncer.send_signal(signal.SIGINT)
            try:
                self._syncer.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._syncer.kill()
        for p in self._procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in self._procs:
            if p is not None:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()

    def _start(self, i: int) -> None:
        log = open(self.workdir / f"learner-{i}.log", "a")
        self._procs[i] = subprocess.Popen(self.learner_argv(i, self.address, self.token), stdout=log,
                                          stderr=subprocess.STDOUT, env=self.env)
        log.close()
        (self.workdir / f"learner-{i}.pid").write_text(str(self._procs[i].pid))

    def _relaunch(self, i: int, signum: int) -> None:
        if self.restarts[i] >= self.max_restarts:
            print(f"learner {i} died of signal {signum} again: not relaunched after {self.max_restarts} restarts",
                  file=sys.stderr)
            self._procs[i] = None
            return
        self.restarts[i] += 1
        print(f"learner {i} died of signal {signum}: relaunched", file=sys.stderr)
        self._start(i)
