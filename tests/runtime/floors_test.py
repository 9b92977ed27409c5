#!/usr/bin/env python3
"""runtime/'s floors: no source includes a header of a floor above its own.

Usage: floors_test.py RUNTIME_DIR FLOOR... (lowest first, as runtime/CMakeLists.txt lists them).

Each floor is a folder of runtime/ with its public headers in <floor>/include/atoll/. A source or
header in floor F may include "atoll/x.h" only where x.h belongs to F or a floor below; a header of
no floor must be generated (schema/*.capnp.h), for a layer above runtime/ is out of reach. A folder
of runtime/ that is not a floor fails too: a new folder takes its place in the list first.

The test then plants an upward include in a copy and checks that it is caught, so it cannot pass
by checking nothing.
"""
import re
import shutil
import sys
import tempfile
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"atoll/([A-Za-z0-9_.]+)"', re.M)


def violations(runtime: Path, floors: list[str]) -> list[str]:
    problems = []
    folders = sorted(p.name for p in runtime.iterdir() if p.is_dir())
    for name in folders:
        if name not in floors:
            problems.append(f"runtime/{name}/ is no floor: add it to ATOLL_RUNTIME_FLOORS, where it belongs")
    home = {}  # header file name -> its floor
    for floor in floors:
        for header in (runtime / floor / "include" / "atoll").glob("*.h"):
            if header.name in home:
                problems.append(f"atoll/{header.name} is in runtime/{home[header.name]}/ and runtime/{floor}/")
            home[header.name] = floor
    for level, floor in enumerate(floors):
        for source in sorted((runtime / floor).rglob("*")):
            if source.suffix not in (".h", ".cc") or not source.is_file():
                continue
            where = source.relative_to(runtime.parent)
            for m in INCLUDE.finditer(source.read_text()):
                header = m.group(1)
                line = source.read_text().count("\n", 0, m.start()) + 1
                if header in home:
                    if floors.index(home[header]) > level:
                        problems.append(f"{where}:{line}: includes atoll/{header} of runtime/{home[header]}/, "
                                        f"a floor above {floor}/")
                elif not header.endswith(".capnp.h"):
                    problems.append(f"{where}:{line}: includes atoll/{header}, which no floor of runtime/ holds "
                                    "(a layer above runtime/?)")
    return problems


def main() -> int:
    runtime, floors = Path(sys.argv[1]), sys.argv[2:]
    found = violations(runtime, floors)
    for problem in found:
        print(problem)
    if found:
        print(f"{len(found)} include(s) against the floors ({' < '.join(floors)})")
        return 1
    print(f"runtime/ keeps its floors: {' < '.join(floors)}")

    # The check must catch what it is for: the lowest floor including the highest.
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "runtime"
        shutil.copytree(runtime, copy, ignore=shutil.ignore_patterns("CMakeLists.txt"))
        top = next((copy / floors[-1] / "include" / "atoll").glob("*.h")).name
        planted = sorted((copy / floors[0]).glob("*.cc"))[0]
        planted.write_text(f'#include "atoll/{top}"\n' + planted.read_text())
        caught = violations(copy, floors)
        if len(caught) != 1 or f"includes atoll/{top}" not in caught[0]:
            print(f"a planted upward include in {planted.name} was not caught as the one problem: {caught}")
            return 1
        print(f"and it catches a planted one: {caught[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
