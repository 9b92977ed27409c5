#!/usr/bin/python3
"""A small convolutional net on MNIST, saved as TorchScript: a model atoll has
no hand-written version of, to show the contract is not just for GPTs.

    python3 examples/torch/mnist_cnn.py           # writes atoll-out/torch/mnist_cnn.pt
    ./build/atoll run examples/torch/mnist_cnn.toml

The classifier contract (docs/models.md, "Bring your own model"):
    forward(inputs float32 [B, 784], targets int64 [B]) -> mean loss (scalar)
    logits(inputs float32 [B, 784]) -> [B, 10]  (optional: held-out accuracy)
atoll hands over MNIST pixels scaled to [0, 1], one row of 784 per image.
"""
import argparse

from torchscript_export import save, torch  # re-runs under /usr/bin/python3 if torch is missing
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
    save(MnistCnn(a.channels), a.out, f"CNN with {a.channels} and {2 * a.channels} filters")

if __name__ == "__main__":
    main()
