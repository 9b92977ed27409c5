#!/usr/bin/python3
"""A GPT in PyTorch with the architecture of atoll's own transformer, saved as
TorchScript for `model.kind = "torchscript"` (see gpt.toml beside this file).

    python3 examples/torch/gpt.py                 # writes atoll-out/torch/gpt.pt
    ./build/atoll run examples/torch/gpt.toml

Architecture (runtime/model/include/atoll/transformer.h): bytes as tokens (vocab
256), learned positions, pre-LayerNorm blocks of causal multi-head attention
and a tanh-GELU MLP, a final LayerNorm, an output head without bias; GPT-2
initialization (N(0, 0.02), residual projections scaled by 1/sqrt(2L)).

The contract atoll calls (docs/models.md, "Bring your own model"):
    forward(inputs int64 [B, T], targets int64 [B, T]) -> mean loss (scalar)
    logits(inputs int64 [B, T]) -> [B, T, 256]  (optional: held-out accuracy)
"""
import argparse
import math

from torchscript_export import save, torch  # re-runs under /usr/bin/python3 if torch is missing
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, width: int, heads: int, context: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)   # rows: queries, keys, values
        self.proj = nn.Linear(width, width)
        # A buffer, not a parameter: each replica keeps its own, nothing merges it. Float, not bool:
        # DistributedDataParallel broadcasts buffers, and gloo takes no bool tensors.
        self.register_buffer("mask", torch.tril(torch.ones(context, context)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hs = C // self.heads
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, hs).transpose(1, 2)
        k = k.view(B, T, self.heads, hs).transpose(1, 2)
        v = v.view(B, T, self.heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(width, 4 * width)
        self.proj = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, context: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(width, eps=1e-5)
        self.attn = Attention(width, heads, context)
        self.ln2 = nn.LayerNorm(width, eps=1e-5)
        self.mlp = Mlp(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, layers: int, width: int, heads: int, context: int):
        super().__init__()
        self.wte = nn.Embedding(256, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList([Block(width, heads, context) for _ in range(layers)])
        self.lnf = nn.LayerNorm(width, eps=1e-5)
        self.head = nn.Linear(width, 256, bias=False)
        residual = 0.02 / math.sqrt(2 * layers)
        for name, p in self.named_parameters():
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "lnf.weight":
                nn.init.ones_(p)
            elif p.dim() == 1:
                nn.init.zeros_(p)
            else:
                std = residual if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    @torch.jit.export
    def logits(self, inputs: torch.Tensor) -> torch.Tensor:
        T = inputs.size(1)
        x = self.wte(inputs) + self.wpe(torch.arange(T, device=inputs.device))
        for block in self.h:
            x = block(x)
        return self.head(self.lnf(x))

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.logits(inputs)
        return F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128, help="bytes of context (the topology's model.context)")
    ap.add_argument("--seed", type=int, default=1, help="torch.manual_seed for the initial weights")
    ap.add_argument("--out", default="atoll-out/torch/gpt.pt", help="where to save the TorchScript module")
    a = ap.parse_args()
    if a.width % a.heads:
        ap.error(f"--width {a.width} is not divisible by --heads {a.heads}")
    torch.manual_seed(a.seed)
    save(GPT(a.layers, a.width, a.heads, a.context), a.out,
         f"GPT {a.layers}x{a.width}, {a.heads} heads, context {a.context}")

if __name__ == "__main__":
    main()
