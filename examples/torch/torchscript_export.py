"""What the example scripts share: Debian's PyTorch, and saving a module as
TorchScript the way atoll loads it (torch.jit.script, then save).

python3-torch belongs to Debian's /usr/bin/python3. A pyenv or venv python3
that comes first on PATH does not see it, so importing this module re-runs
the calling script under /usr/bin/python3 when torch is missing there.
"""
import os
import sys

try:
    import torch
except ImportError:
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print(f"{os.path.basename(sys.argv[0])}: PyTorch is missing: install python3-torch (scripts/setup does)",
          file=sys.stderr)
    sys.exit(77)  # CTest's "skipped": the fixtures that call the examples say why


def save(module: "torch.nn.Module", out: str, what: str) -> None:
    """Scripts `module`, saves it at `out` (making its folder) and says so."""
    scripted = torch.jit.script(module)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    scripted.save(out)
    n = sum(p.numel() for p in scripted.parameters())
    print(f"{os.path.basename(sys.argv[0])}: saved {out}: {what}, {n} parameters (torch {torch.__version__})")
