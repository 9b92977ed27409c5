#!/usr/bin/python3
"""Runs the walk-through of docs/models.md ("An external model, end to end") as written.

Usage: walkthrough_test.py REPO_ROOT BUILD_DIR

Its files (the blocks whose first line is `# NAME.EXT`) are written into a
scratch folder and its shell block's commands run there, one by one, with the
build's `atoll` on PATH and its Python package importable; the port 7070 is
swapped for a free one, the budget for one no run reaches (the test ends the run
with SIGINT once learner 1 is merged again). While the learners train, learner 1 is killed with
SIGKILL and its command started again, as the page suggests. Then:
  - the start line and `atoll validate` say the embeddings (transformer.wte,
    transformer.wpe) are merged by weighted mean;
  - the report counts one restart, with its re-integration time;
  - the report's held-out figure is the final model's (`"final": true`) and
    equals what learner 0's evaluator printed for it;
  - every process exits 0, and final.atoll loads into model.GPT().
Exit 0 pass, 1 fail, 77 skipped (no torch for this Python).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECTION = "### An external model, end to end"
FILE_LINE = re.compile(r"#\s*([\w.-]+\.\w+)")


def fail(why: str, logs: Path | None = None) -> None:
    print(f"FAILED: {why}")
    if logs:
        for log in sorted(logs.glob("*.log")):
            print(f"---- {log.name} (last 25 lines)")
            print("\n".join(log.read_text(errors="replace").splitlines()[-25:]))
    sys.exit(1)


def walkthrough(page: Path, section: str = SECTION) -> tuple[dict, list]:
    """({file name: text}, [command lines]) of the page's walk-through `section` (its heading line)."""
    text = page.read_text()
    start = text.index(section)
    after = re.search(r"\n#{2,3} ", text[start + len(section):])  # the next heading
    lines = text[start:start + len(section) + after.start() if after else len(text)].split("\n")
    files, commands, block, kind = {}, [], None, ""
    for line in lines:
        fence = re.match(r"```(\w*)", line.strip())
        if fence and block is None:
            block, kind = [], fence.group(1)
            continue
        if fence and block is not None:
            named = FILE_LINE.fullmatch(block[0].strip()) if block else None
            if named:
                files[named.group(1)] = "\n".join(block) + "\n"
            elif kind == "sh":
                commands += [c for c in block if c.strip() and not c.strip().startswith("#")]
            block = None
            continue
        if block is not None:
            block.append(line)
    return files, commands


# The page's budget swapped for one no run reaches: a fast machine could spend 2M bytes before a killed
# learner is back. The test ends the run (SIGINT to the syncer) once it saw what it waits for.
UNENDING = {"tokens = 2000000 ": "tokens = 1000000000000 "}


def wait_for(log: Path, pattern: str, seconds: float, count: int = 1, logs: Path | None = None,
             alive: subprocess.Popen | None = None) -> None:
    """Until `log` has `count` lines matching `pattern`; fails after `seconds`, or once `alive` ended."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if log.exists() and len(re.findall(pattern, log.read_text(errors="replace"))) >= count:
            return
        if alive is not None and alive.poll() is not None:
            fail(f"{log.name}: the process ended before {count} line(s) matching {pattern!r}", logs)
        time.sleep(0.1)
    fail(f"{log.name}: no {count} line(s) matching {pattern!r} within {seconds} s", logs)


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def local(text: str, ports: dict) -> str:
    """`text` with each port the page writes swapped for a free one."""
    for written, free in ports.items():
        text = text.replace(written, free)
    return text


def scratch(build: Path, files: dict, ports: dict, prefix: str) -> tuple[Path, Path, dict]:
    """A folder holding the walk-through's files (ports swapped), its logs/ and a bin/ with the build's
    `atoll` and this Python as `python3`; and the environment its commands run in."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    logs = work / "logs"
    logs.mkdir()
    for name, text in files.items():
        (work / name).write_text(local(text, ports))
    bin_dir = work / "bin"
    bin_dir.mkdir()
    (bin_dir / "atoll").symlink_to(build / "atoll")
    (bin_dir / "python3").symlink_to(sys.executable)
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin", PYTHONPATH=str(build / "python"))
    env.pop("ATOLL_TOKEN", None)
    return work, logs, env


def run_commands(commands: list, work: Path, env: dict, logs: Path, ports: dict) -> tuple[dict, dict]:
    """Runs the walk-through's command lines in `work`, one by one, as a shell would: a line ending in `&`
    in the background (an `atoll syncer` until it serves), the others to their end (failing the test if
    one fails); `wait` waits for nothing. Returns ({command: (Popen, log)} of the background ones,
    {command: output} of the others)."""
    background, outputs = {}, {}
    for i, command in enumerate(commands):
        command = local(command, ports).strip()
        if command == "wait":
            continue
        if command.endswith("&"):
            command = command[:-1].strip()
            log = logs / f"{i}.log"
            proc = subprocess.Popen(["bash", "-c", "exec " + command], cwd=work, env=env, stdout=open(log, "w"),
                                    stderr=subprocess.STDOUT)
            background[command] = (proc, log)
            if command.startswith("atoll syncer"):
                wait_for(log, r"serving learners on", 30, logs=logs)
            continue
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=120)
        (logs / f"{i}.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            fail(f"`{command}` exited {done.returncode}", logs)
        outputs[command] = done.stdout + done.stderr
    return background, outputs


def main() -> int:
    repo, build = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"skipped: torch is not installed for {sys.executable} (scripts/setup installs python3-torch)")
        return 77
    files, commands = walkthrough(repo / "docs" / "models.md")
    for needed in ("model.py", "learn.py", "topology.toml"):
        if needed not in files:
            fail(f"the walk-through has no {needed} block")
    ports = {"7070": free_port(), **UNENDING}
    work, logs, env = scratch(build, files, ports, "atoll-walkthrough-")
    background, outputs = run_commands(commands, work, env, logs, ports)
    syncer = next(c for c in background if c.startswith("atoll syncer"))
    learner1 = next(c for c in background if c.startswith("python3 learn.py --id 1"))
    syncer_log = background[syncer][1]
    running = background[syncer][0]

    # Learner 1 killed early in the run and started again by the same command: one restart.
    wait_for(syncer_log, r"learner 1 registered", 120, logs=logs, alive=running)
    wait_for(syncer_log, r"rounds [1-9]", 120, logs=logs, alive=running)  # the progress line: rounds merged it
    background[learner1][0].send_signal(signal.SIGKILL)
    background[learner1][0].wait(timeout=30)
    log = logs / "learner1-again.log"
    again = subprocess.Popen(["bash", "-c", "exec " + learner1], cwd=work, env=env, stdout=open(log, "w"),
                             stderr=subprocess.STDOUT)
    wait_for(syncer_log, r"learner 1 registered", 120, count=2, logs=logs, alive=running)
    wait_for(syncer_log, r"learner 1 is merged again", 120, logs=logs, alive=running)
    running.send_signal(signal.SIGINT)  # the run's end, in order: every learner is told it is over

    for command, (proc, _) in list(background.items()) + [(learner1 + " (again)", (again, log))]:
        if command == learner1:
            continue  # killed on purpose
        try:
            status = proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            fail(f"`{command}` did not end within 300 s", logs)
        if status != 0:
            fail(f"`{command}` exited {status}", logs)

    said = syncer_log.read_text()
    averaged = "merged by weighted mean for transformer.wte.weight, transformer.wpe.weight"
    validated = next((out for c, out in outputs.items() if c.startswith("atoll validate")), "")
    if averaged not in said or averaged not in validated:
        fail("the start line or atoll validate does not say the embeddings merge by weighted mean", logs)
    if validated.count("parameters") != 1:
        fail(f"atoll validate names the parameter count {validated.count('parameters')} times: {validated}", logs)
    report = json.loads((work / "report.json").read_text())
    learners = {l["id"]: l for l in report["per_learner"]}
    if report["restarts"] != 1 or learners[1]["restarts"] != 1 or len(report["reintegration_seconds"]) != 1:
        fail(f"restarts {report['restarts']}, learner 1's {learners[1]['restarts']}, re-integrations "
             f"{report['reintegration_seconds']}: expected one restart of learner 1", logs)
    if not all(l["merged"] > 0 for l in learners.values()):
        fail(f"a learner was never merged: {learners}", logs)
    printed = re.search(r"learner 0: the final model, ([0-9.]+) bits per byte", background[
        next(c for c in background if c.startswith("python3 learn.py --id 0"))][1].read_text())
    ev = report["eval"]
    # The same figure: the report keeps 6 digits, the learner printed 4.
    if not printed or not ev.get("final") or abs(ev["bits_per_byte"] - float(printed.group(1))) > 1e-4:
        fail(f"the report's held-out figure {ev} is not the final model's ({printed and printed.group(1)})", logs)
    check = subprocess.run(["python3", "-c", "import atoll, model; atoll.load_model(model.GPT(), 'final.atoll')"],
                           cwd=work, env=env, capture_output=True, text=True)
    if check.returncode != 0:
        fail(f"final.atoll does not load into model.GPT(): {check.stderr}", logs)
    # Uptime depends on the machine's load: printed, not bounded here (report_test holds its definition).
    print(f"walk-through: {report['tokens']} tokens, {report['rounds']} rounds, uptime {report['uptime']:.3f}; "
          "embeddings averaged; "
          f"one restart (re-integrated in {report['reintegration_seconds'][0]:.3f} s); "
          f"held-out {ev['bits_per_byte']:.4f} bits per byte, of the final model")
    subprocess.run(["rm", "-rf", str(work)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
