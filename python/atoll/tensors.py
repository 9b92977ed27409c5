"""Parameters between the user's tensors and atoll: which tensors, checked, and float32 host buffers.

atoll hands values out as ``_atoll.Floats`` (float32 buffers it owns) and takes
any C-contiguous float32 buffer. A torch tensor reads and writes them through
``torch.frombuffer``, without a copy and without NumPy.
"""
from __future__ import annotations

from typing import Any, Sequence, Tuple

from . import _atoll


def named_parameters(model: Any, what: str) -> list:
    """[(name, tensor)] of a module, or of named_parameters() given directly; a tied weight once."""
    import torch

    if isinstance(model, torch.nn.Module):
        pairs = list(model.named_parameters())
    else:
        try:
            pairs = list(model)
        except TypeError:
            raise TypeError(f"{what}: expected a torch.nn.Module or its named_parameters(), "
                            f"got {type(model).__name__}") from None
    out, seen = [], set()
    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"{what}: expected (name, tensor) pairs, got {item!r:.80}")
        name, p = item
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"{what}: parameter {name} is a {type(p).__name__}, not a torch.Tensor")
        if id(p) in seen:
            continue
        seen.add(id(p))
        local = local_tensor(p)
        check_parameter(name, local, tuple(local.shape))
        out.append((name, p))
    if not out:
        raise ValueError(f"{what}: there are no parameters to train")
    return out


def is_dtensor(p: Any) -> bool:
    """Whether ``p`` is a DTensor (torch 2's distributed tensor, as FSDP2's fully_shard makes parameters)."""
    return hasattr(p, "placements") and hasattr(p, "to_local") and hasattr(p, "device_mesh")


def local_tensor(p: Any) -> Any:
    """The values this process holds of parameter ``p``: a DTensor's local shard, else ``p`` itself."""
    return p.to_local() if is_dtensor(p) else p


def check_parameter(name: str, p: Any, shape: tuple) -> None:
    """Raises unless ``p`` is a dense, contiguous float32 tensor of ``shape``."""
    import torch

    if p.dtype != torch.float32:
        raise TypeError(f"parameter {name} is {p.dtype}: atoll exchanges float32 parameters "
                        "(keep float32 weights; compute in bf16 with torch.autocast)")
    if p.layout != torch.strided:
        raise TypeError(f"parameter {name} is a {p.layout} tensor: atoll exchanges dense parameters")
    if tuple(p.shape) != shape:
        raise ValueError(f"parameter {name} changed its shape from {list(shape)} to {list(p.shape)} during the "
                         "run: a run's parameters keep their shapes")
    if not p.is_contiguous():
        raise ValueError(f"parameter {name} {list(p.shape)} is not contiguous: atoll reads and writes a parameter "
                         "as one block (make it contiguous when the module is built)")


def layout_shape(dims: Sequence[int]) -> tuple:
    """A shape as atoll's layout has it: a scalar is one value, (1,)."""
    return tuple(dims) or (1,)


def view(values: Any) -> Any:
    """A CPU float32 torch tensor over ``values`` (an ``_atoll.Floats``), sharing its memory (it keeps them
    alive); a torch tensor as it is (an island's values received from its leader)."""
    import torch

    if isinstance(values, torch.Tensor):
        return values
    if len(values) == 0:
        return torch.empty(0, dtype=torch.float32)
    return torch.frombuffer(values, dtype=torch.float32)


def host_buffer(n: int) -> Tuple["_atoll.Floats", Any]:
    """n float32 values in host memory atoll can take, and a torch tensor to write them through."""
    values = _atoll.Floats(n)
    return values, view(values)


def gather(tensors: Sequence[Any]) -> "_atoll.Floats":
    """The tensors' values back to back, in one host buffer (for a model file)."""
    import torch

    values, out = host_buffer(sum(t.numel() for t in tensors))
    at = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            out[at:at + n].copy_(t.detach().reshape(-1))
            at += n
    return values


def scatter(values: "_atoll.Floats", tensors: Sequence[Any]) -> None:
    """Copies ``values`` (back to back, in order) into ``tensors``, in place, on their devices."""
    import torch

    source = view(values)
    at = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(source[at:at + n].view(t.shape))
            at += n


def as_state_of(p: Any, local: Any) -> Any:
    """``local`` (this process's part) as optimizer state for parameter ``p``: a DTensor's state is a DTensor of
    the same placement."""
    if not is_dtensor(p):
        return local
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch before 2.4
        from torch.distributed._tensor import DTensor
    return DTensor.from_local(local, p.device_mesh, p.placements, run_check=False, shape=p.shape, stride=p.stride())
