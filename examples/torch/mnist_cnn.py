#!/usr/bin/python3
"""A small convolutional net on MNIST, saved as TorchScript: a model atoll has
no hand-written version of, to show the contract is not just for GPTs.

    python3 examples/torch/mnist_cnn.py           # writes atoll-out/torch/mnist_cnn.pt
    ./build/atoll run examples/torch/mnist_cnn.toml

The classifier contract (README, "Bring your own model"):
    forward(inputs float32 [B, 784], targets int64 [B]) -> mean loss (scalar)
    logits(inputs float32 [B, 784]) -> [B, 10]  (optional: held-out accuracy)
atoll hands over MNIST pixels scaled to [0, 1], one row of 784 per image.
"""
import argparse
import os
import sys

try:
    import torch
except ImportError:
    # python3-torch belongs to Debian's Python; a pyenv or venv python3 that
    # comes first on PATH does not see it.
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("mnist_cnn.py: PyTorch is missing: install python3-torch (scripts/setup does)")
import torch.nn as nn
import torch.nn.functional as F


class MnistCnn(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 5)              # 28 -> 24, pooled to 12
        self.conv2 = nn.Conv2d(channels, 2 * channels, 5)   # 12 -> 8, pooled to 4
        self.fc = nn.Linear(2 * channels * 4 * 4, 64)
        self.out = nn.Linear(64, 10)

    @torch.jit.export
    def logits(self, inputs: torch.Tensor) -> torch.Tensor:
        x = inputs.view(-1, 1, 28, 28)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.out(F.relu(self.fc(x.flatten(1))))

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.logits(inputs), targets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--channels", type=int, default=8, help="filters of the first convolution (the second has twice)")
    ap.add_argument("--seed", type=int, default=1, help="torch.manual_seed for the initial weights")
    ap.add_argument("--out", default="atoll-out/torch/mnist_cnn.pt", help="where to save the TorchScript module")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    model = torch.jit.script(MnistCnn(a.channels))
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    model.save(a.out)
    n = sum(p.numel() for p in model.parameters())
    print(f"mnist_cnn.py: saved {a.out}: CNN with {a.channels} and {2 * a.channels} filters, {n} parameters "
          f"(torch {torch.__version__})")


if __name__ == "__main__":
    main()
