"""The type stub python/atoll/_atoll.pyi says what the compiled module has: the same names, kinds and parameters."""
from __future__ import annotations

import ast
import re
import types
from pathlib import Path

import pytest

import atoll
from atoll import _atoll

STUB = Path(atoll.__file__).with_name("_atoll.pyi")
# What every pybind11 class or module has, and the stub need not repeat.
IMPLICIT = {"__doc__", "__module__", "__dict__", "__weakref__", "__new__", "__buffer__", "__release_buffer__",
            "_pybind11_conduit_v1_"}


def stub_params(f: ast.FunctionDef) -> list:
    args = [a.arg for a in f.args.posonlyargs + f.args.args + f.args.kwonlyargs]
    return args[1:] if args[:1] == ["self"] else args


def stub_entries() -> dict:
    """{name: ("function", params) | ("class", {member: (kind, params)}) | ("value", None)} of the stub."""
    out = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = ("function", stub_params(node))
        elif isinstance(node, ast.ClassDef):
            members = {}
            for m in node.body:
                if isinstance(m, ast.FunctionDef) and m.name not in IMPLICIT:
                    decorators = {d.id for d in m.decorator_list if isinstance(d, ast.Name)}
                    kind = "property" if "property" in decorators else "method"
                    members[m.name] = (kind, None if kind == "property" else stub_params(m))
            out[node.name] = ("class", members)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = ("value", None)
    return out


def signature_params(f: object) -> list:
    """Parameter names from pybind11's signature line: 'name(self: T, a: int, b: str) -> R'."""
    line = (f.__doc__ or "").splitlines()[0]
    inside = re.match(r"^\w+\((.*)\)( -> .*)?$", line)
    assert inside, f"no signature in {line!r}"
    depth, names, current = 0, [], ""
    for ch in inside.group(1) + ",":
        depth += ch in "[(" and 1 or 0
        depth -= ch in "])" and 1 or 0
        if ch == "," and depth == 0:
            if current.strip():
                names.append(current.split(":")[0].strip())
            current = ""
        else:
            current += ch
    return [n for n in names if n != "self"]


def compiled_entries() -> dict:
    out = {}
    for name, value in vars(_atoll).items():
        if name.startswith("__") and name != "__version__":
            continue
        if isinstance(value, type) and issubclass(value, BaseException):
            out[name] = ("class", {})  # atoll.Refused, atoll.Unavailable: nothing of their own
        elif isinstance(value, type):
            members = {}
            for m, attr in vars(value).items():
                if m in IMPLICIT or (m.startswith("_") and m not in ("__init__", "__len__")):
                    continue
                if isinstance(attr, types.WrapperDescriptorType):
                    continue  # a class without a constructor: pybind11's __init__ that says so
                if isinstance(attr, property):
                    members[m] = ("property", None)
                else:
                    f = attr.__func__ if isinstance(attr, staticmethod) else attr
                    members[m] = ("method", signature_params(f))
            out[name] = ("class", members)
        elif callable(value):
            out[name] = ("function", signature_params(value))
        else:
            out[name] = ("value", None)
    return out


def test_the_stub_and_the_module_name_the_same_things() -> None:
    stub, compiled = stub_entries(), compiled_entries()
    assert sorted(set(compiled) - set(stub)) == [], "in the module, not in _atoll.pyi"
    assert sorted(set(stub) - set(compiled)) == [], "in _atoll.pyi, not in the module"


@pytest.mark.parametrize("name", sorted(compiled_entries()))
def test_each_entry_has_the_same_kind_members_and_parameters(name: str) -> None:
    stub_kind, stub_detail = stub_entries()[name]
    kind, detail = compiled_entries()[name]
    assert stub_kind == kind, f"{name}: a {stub_kind} in the stub, a {kind} in the module"
    if kind == "function":
        assert stub_detail == detail, f"{name}: parameters in the stub {stub_detail}, in the module {detail}"
    if kind == "class":
        assert sorted(stub_detail) == sorted(detail), f"{name}: members in the stub, in the module"
        for member, (member_kind, params) in detail.items():
            assert stub_detail[member][0] == member_kind, f"{name}.{member}: {stub_detail[member][0]} != {member_kind}"
            if params is not None and member != "__len__":
                assert stub_detail[member][1] == params, f"{name}.{member}: stub {stub_detail[member][1]} != {params}"
