"""A tensor split across fragments (a syncer in shards splits one larger than a fragment's share):
Transfers moves each block between its rows of the tensor and its place in the fragment vector."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from atoll import _atoll
from atoll.tensors import view
from atoll.transfers import Transfers

# torch.nn.Linear(8, 16) then Linear(16, 3): 195 values. With two fragments in shards, the target
# is 98 values, so 0.weight (16 x 8 = 128) is split into rows 0-11 (96 values) and rows 12-15 (32),
# as atoll's plan does; each piece is (tensor, offset in the fragment, count, offset in the tensor).
PIECES = [
    [(0, 0, 96, 0), (3, 96, 3, 0)],                  # 0.weight rows 0-11, 2.bias
    [(0, 0, 32, 96), (1, 32, 16, 0), (2, 48, 48, 0)],  # 0.weight rows 12-15, 0.bias, 2.weight
]
SIZES = [99, 96]


def module() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def fragment_values(flat: torch.Tensor, offsets: list, f: int) -> torch.Tensor:
    """Fragment f's vector from the parameters back to back (layout order), as atoll's gather() makes it."""
    out = torch.empty(SIZES[f])
    for index, at, n, start in PIECES[f]:
        out[at:at + n] = flat[offsets[index] + start:offsets[index] + start + n]
    return out


def floats(t: torch.Tensor) -> "_atoll.Floats":
    values = _atoll.Floats(t.numel())
    view(values).copy_(t)
    return values


def test_split_pieces_round_trip_through_apply_and_read() -> None:
    model = module()
    params = list(model.parameters())
    offsets = [0]
    for p in params:
        offsets.append(offsets[-1] + p.numel())
    assert sum(SIZES) == offsets[-1] and params[0].numel() > max(SIZES)  # a tensor larger than a fragment
    transfers = Transfers(lambda i: params[i], PIECES, SIZES, cuda=False, released=lambda number, seconds: True)

    def flat() -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in params])

    # Reads give each fragment's vector, the split tensor's rows in both.
    before = flat()
    pending = transfers.read([1, 0])
    got = torch.frombuffer(transfers.collect(pending), dtype=torch.float32).clone()
    assert torch.equal(got, torch.cat([fragment_values(before, offsets, 1), fragment_values(before, offsets, 0)]))

    # Uploads (values <- scale * values + offset) land in the split tensor's own rows, nowhere else.
    target = torch.arange(offsets[-1], dtype=torch.float32)
    transfers.apply([SimpleNamespace(fragment=f, scale=0.0, offset=floats(fragment_values(target, offsets, f)))
                     for f in (0, 1)])
    assert torch.equal(flat(), target)
    assert torch.equal(params[0][12], torch.arange(96, 104, dtype=torch.float32))  # row 12 starts the second block
    step = torch.linspace(-1, 1, offsets[-1])
    transfers.apply([SimpleNamespace(fragment=1, scale=1.0, offset=floats(fragment_values(step, offsets, 1))),
                     SimpleNamespace(fragment=0, scale=0.5, offset=floats(fragment_values(step, offsets, 0)))])
    expected = target.clone()
    for f, scale in ((0, 0.5), (1, 1.0)):
        for index, _, n, start in PIECES[f]:
            at = slice(offsets[index] + start, offsets[index] + start + n)
            expected[at] = scale * target[at] + step[at]
    assert torch.allclose(flat(), expected)

    # And read back, they are the fragments' vectors again.
    pending = transfers.read([0, 1])
    got = torch.frombuffer(transfers.collect(pending), dtype=torch.float32).clone()
    assert torch.equal(got, torch.cat([fragment_values(expected, offsets, 0), fragment_values(expected, offsets, 1)]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
def test_split_pieces_round_trip_on_a_gpu() -> None:
    model = module().cuda()
    params = list(model.parameters())
    offsets = [0]
    for p in params:
        offsets.append(offsets[-1] + p.numel())
    transfers = Transfers(lambda i: params[i], PIECES, SIZES, cuda=True, released=lambda number, seconds: True)
    target = torch.arange(offsets[-1], dtype=torch.float32)
    transfers.apply([SimpleNamespace(fragment=f, scale=0.0, offset=floats(fragment_values(target, offsets, f)))
                     for f in (1, 0)])
    pending = transfers.read([0, 1])
    got = torch.frombuffer(transfers.collect(pending), dtype=torch.float32).clone()
    assert torch.equal(got, torch.cat([fragment_values(target, offsets, 0), fragment_values(target, offsets, 1)]))
    assert torch.equal(torch.cat([p.detach().reshape(-1).cpu() for p in params]), target)
