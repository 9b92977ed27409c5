#!/usr/bin/env python3
"""A strict parser of the Prometheus text exposition format (version 0.0.4).

Usage: prometheus_text.py FILE [--require NAME]...
Parses every line as the format's grammar says (HELP, TYPE, samples with
labels and escapes, values including NaN/+Inf), and checks what Prometheus
checks on ingest: one TYPE per family, before its samples; samples of a
family together; no duplicate series; counters named *_total, finite and
non-negative. Also holds atoll's own convention: every name starts atoll_.
Prints the families found; exits 1 naming the first bad line.
"""
import math
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
VALUE = r"(?:[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|[+-]?Inf|NaN)"
LABEL_VALUE = r'"(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE = re.compile(rf"^({NAME})(?:\{{((?:{LABEL}={LABEL_VALUE},?)*)\}})? ({VALUE})(?: (-?\d+))?$")
LABEL_PAIR = re.compile(rf"({LABEL})=({LABEL_VALUE})")
HELP = re.compile(rf"^# HELP ({NAME}) (.*)$")
TYPE = re.compile(rf"^# TYPE ({NAME}) (counter|gauge|histogram|summary|untyped)$")


def fail(line_no, line, why):
    print(f"line {line_no}: {why}: {line!r}", file=sys.stderr)
    sys.exit(1)


def parse(text):
    families = {}   # name -> type
    seen_series = set()
    closed = set()  # families whose samples ended
    current = None
    if not text.endswith("\n"):
        fail(0, text[-40:], "the exposition must end with a newline")
    for no, line in enumerate(text.split("\n")[:-1], 1):
        if line.startswith("# HELP"):
            if not HELP.match(line):
                fail(no, line, "bad HELP line")
            continue
        if line.startswith("# TYPE"):
            m = TYPE.match(line)
            if not m:
                fail(no, line, "bad TYPE line")
            name, kind = m.groups()
            if name in families:
                fail(no, line, "a second TYPE for " + name)
            families[name] = kind
            continue
        if line.startswith("#") or line == "":
            continue
        m = SAMPLE.match(line)
        if not m:
            fail(no, line, "not a sample line")
        name, labels, value, _ = m.groups()
        family = name
        if family not in families:
            fail(no, line, "a sample before its TYPE")
        if current != family:
            if family in closed:
                fail(no, line, "samples of " + family + " are not together")
            if current:
                closed.add(current)
            current = family
        pairs = tuple(sorted(LABEL_PAIR.findall(labels or "")))
        if len({k for k, _ in pairs}) != len(pairs):
            fail(no, line, "a label given twice")
        if (name, pairs) in seen_series:
            fail(no, line, "a duplicate series")
        seen_series.add((name, pairs))
        v = float(value.replace("Inf", "inf").replace("NaN", "nan"))
        if families[family] == "counter":
            if not name.endswith("_total"):
                fail(no, line, "a counter not named *_total")
            if not math.isfinite(v) or v < 0:
                fail(no, line, "a counter must be finite and >= 0")
        if not name.startswith("atoll_"):
            fail(no, line, "not an atoll_ metric")
    return families, seen_series


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    text = open(args[0], encoding="utf-8").read()
    families, series = parse(text)
    required = [args[i + 1] for i, a in enumerate(args) if a == "--require"]
    names = {n for n, _ in series}
    for r in required:
        if r not in names:
            print(f"missing metric {r}", file=sys.stderr)
            sys.exit(1)
    print(f"{len(families)} families, {len(series)} series: ok")


if __name__ == "__main__":
    main()
