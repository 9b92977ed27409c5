"""Values cross the binding as float32 buffers: what atoll takes and what it hands out, with or without NumPy."""
from __future__ import annotations

import array
from pathlib import Path

import pytest
import torch

import atoll
from atoll import _atoll

SHAPES = [("w", [2, 3]), ("b", [3])]


def test_floats_are_a_writable_buffer_that_torch_and_memoryview_share() -> None:
    f = _atoll.Floats(4)
    assert len(f) == 4 and memoryview(f).format == "f" and memoryview(f).tolist() == [0.0] * 4
    torch.frombuffer(f, dtype=torch.float32).add_(1.5)
    assert memoryview(f).tolist() == [1.5] * 4


@pytest.mark.parametrize("make", [
    lambda: array.array("f", range(9)),
    lambda: _atoll.Floats(9),
    lambda: memoryview(array.array("f", range(9))),
], ids=["array", "Floats", "memoryview"])
def test_any_contiguous_float32_buffer_is_taken(tmp_path: Path, make) -> None:
    values = make()
    _atoll.save_model(str(tmp_path / "m.atoll"), SHAPES, values, "buffers")
    tensors, loaded, description = _atoll.load_model(str(tmp_path / "m.atoll"))
    assert description == "buffers" and [list(d) for _, d in tensors] == [[2, 3], [3]]
    assert memoryview(loaded).tolist() == list(memoryview(values).cast("B").cast("f"))


def test_numpy_arrays_are_taken_as_buffers_whatever_numpy_it_is(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy", reason="NumPy is not installed for this interpreter")
    _atoll.save_model(str(tmp_path / "m.atoll"), SHAPES, np.arange(9, dtype=np.float32), "numpy")
    _, loaded, _ = _atoll.load_model(str(tmp_path / "m.atoll"))
    assert np.array_equal(np.frombuffer(loaded, dtype=np.float32), np.arange(9, dtype=np.float32))
    with pytest.raises(TypeError, match="expected float32 values, got a buffer of format 'd'"):
        _atoll.save_model(str(tmp_path / "x.atoll"), SHAPES, np.arange(9.0), "float64")
    with pytest.raises(ValueError, match="not contiguous"):
        _atoll.save_model(str(tmp_path / "x.atoll"), SHAPES, np.arange(18, dtype=np.float32)[::2], "strided")


def test_wrong_buffers_are_refused_naming_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="expected float32 values, got a buffer of format 'i'"):
        _atoll.save_model(str(tmp_path / "x.atoll"), SHAPES, array.array("i", range(9)), "ints")
    with pytest.raises(TypeError):
        _atoll.save_model(str(tmp_path / "x.atoll"), SHAPES, [0.0] * 9, "a list is no buffer")
    with pytest.raises(ValueError, match="9|values"):
        _atoll.save_model(str(tmp_path / "x.atoll"), SHAPES, array.array("f", range(5)), "too few")


def test_a_module_round_trips_through_a_model_file_without_numpy(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    atoll.save_model(model, tmp_path / "linear.atoll")
    other = torch.nn.Linear(3, 2)
    assert atoll.load_model(other, tmp_path / "linear.atoll") == "Linear"
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))
