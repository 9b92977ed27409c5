#!/usr/bin/python3
"""Checks that the documentation still matches the repository and the binary.

Usage: docs_check.py REPO_ROOT BUILD_DIR

For README.md and every docs/*.md:
  - in each fenced code block of type sh, bash, shell or console (console:
    only the lines that start with "$ "), every command line is split into
    its commands (at &&, ||, ;, |). For each command:
      * every repository path it names exists (globs allowed); a path under
        build/ is looked up in BUILD_DIR;
      * for `atoll`, `./build/atoll` or `build/atoll`: the subcommand exists,
        and every --flag given appears in `BUILD_DIR/atoll SUBCOMMAND --help`
        (run once per subcommand, cached);
      (a file that a block of the same page writes, a walk-through's `# NAME.EXT`
      first line, counts as there);
  - every relative markdown link resolves to an existing file or folder, and
    a #section of a markdown file names one of its headings.
And for the binary, the options several subcommands share (COMMON_FLAGS):
  - every subcommand listed for a common option offers it, under the same
    names (-q,--quiet), and no other subcommand does;
  - every subcommand that offers it shows the same help text (defaults, as in
    --report's, may differ);
  - an option that two subcommands offer is either common or listed as
    meaning something else in one of them (OTHER_MEANINGS).
And for the prose of README.md and docs/*.md:
  - no issue number ("issue 25", "Issues #3"): the pages say what the project
    does, how to run it and what was measured, not which ticket asked for it;
  - a figure quoted in several places (FIGURES: each figure with the patterns
    that find its copies) has one value: every copy agrees with the most
    precise one, to the precision the copy gives (1.56 agrees with 1.558,
    3.4 does not with 2.74); every pattern still finds its figure somewhere.
Before all that it runs those two checks on pages made to fail (self_test()),
so that a check that no longer catches anything fails too.
Prints each failure as FILE:LINE: what (FILE: what for the binary's help, FILE
the subcommand's cli/<name>_command.cc), and exits 1 if there was any.
Standard library only.
"""

import decimal
import fnmatch
import glob
import os
import re
import shlex
import subprocess
import sys

CODE_TYPES = {"sh", "bash", "shell", "console"}

# Path-like words that cannot be checked against the repository, each with why.
# Patterns are fnmatch patterns on the word as written (after a leading "./").
ALLOWED_PATHS = {
    "atoll-out/*": "what runs write (reports, certificates, models): made by the command itself",
    "certs/*": "the certificates that `atoll certs certs`, just before, makes",
    "topo.toml": "an illustrative file name in an example of an error message",
    "mine.toml": "the file that `atoll topology > mine.toml`, just before, writes",
    "dist/*": "the wheels scripts/wheel, just before, writes",
}

# Flags whose value is something a command creates, never an input to check.
OUTPUT_FLAGS = {"--report", "--out", "--tapes", "--tape", "--plot", "--port-file", "--save-model",
                "--tls-dir", "--build", "-B", "--prefix", "--test-dir"}

PATH_SUFFIXES = (".toml", ".py", ".sh", ".md", ".json", ".jsonl", ".csv", ".svg", ".pt", ".cc", ".h",
                 ".capnp", ".txt", ".pem", ".key")

ATOLL_PROGRAMS = {"atoll", "./build/atoll", "build/atoll"}

# The options that mean the same in several subcommands, each declared once in
# cli/ (command.h: add_quiet_flag, add_verbose_flag, add_set_option,
# add_report_option, add_data_option, add_threads_option, add_seconds_option,
# add_sample_prompt_option;
# run_status.h: add_metrics_flags; cluster_flags.h: add_cluster_flags), as the
# help names them: the subcommands that take each, exactly.
COMMON_FLAGS = {
    "-q,--quiet": ("run", "syncer", "learner"),
    "-v,--verbose": ("run", "syncer", "learner", "chaos", "sweep"),
    "--metrics": ("run", "syncer", "learner"),
    "--metrics-public": ("run", "syncer", "learner"),
    "--report": ("run", "syncer", "learner", "chaos", "simulate", "assemble"),
    "--data": ("run", "syncer", "learner", "chaos", "sweep", "validate", "assemble"),
    "--threads": ("run", "learner", "chaos", "sweep"),
    "--seconds": ("run", "syncer"),
    "--sample-prompt": ("run", "syncer", "assemble"),
    "--curve": ("run", "syncer", "sweep"),
    "--set": ("run", "syncer", "sweep", "validate", "topology", "bandwidth", "assemble"),
    "--token-file": ("syncer", "learner"),
    "--timeout": ("syncer", "learner"),
    "--tls-cert": ("syncer", "learner"),
    "--tls-key": ("syncer", "learner"),
    "--tls-ca": ("syncer", "learner"),
    "--tls-name": ("syncer", "learner"),
    "--link": ("syncer", "learner"),
}

# Common options worded for the side they are on (add_cluster_flags names the
# peer): each side's text is its own, so the texts are not compared.
WORDED_PER_SIDE = {"--timeout", "--tls-cert", "--tls-ca", "--tls-name"}

# An option of a common name that means something else in one subcommand, with why.
OTHER_MEANINGS = {
    ("simulate", "--set"): "it overrides a simulation plan's keys, not a topology's",
    ("run", "--link"): "with --processes, the link every process it starts emulates",
    ("bandwidth", "--link"): "the learners' link to simulate settings on; nothing is emulated",
    ("assemble", "--run-name"): "the ended run whose checkpoints it reads, not a name a syncer starts or resumes under",
    ("assemble", "--save-model"): "the model put together from the shards' checkpoints after the run, not a syncer's own",
}

# What CLI11 gives every subcommand.
BUILT_IN_FLAGS = {"--help", "--help-all"}

# An issue number in the prose: "issue 25", "Issues #3", "issue\n7".
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)

# Figures that README.md and docs/*.md quote in more than one place, each with
# the patterns that find its copies (group 1: the figure; matched over a page
# with its line breaks read as spaces, so a pattern may span a wrapped line).
# Where a page repeats a figure a link to where it is measured is better; these
# are the copies that stay (the README's headline tables, a page's own summary).
FIGURES = {
    "decoupled's gap to tuned dp at equal tokens, dedicated hardware (docs/benchmarks.md)": [
        r"equal tokens: against tuned dp[^|]*\| \+(\d+\.\d+)%",
        r"\| \*\*decoupled, all 6 runs\*\* \| \*\*[\d.]+ ± [\d.]+\*\* \| \*\*\+(\d+\.\d+)%",
        r"decoupled is\s+(\d+(?:\.\d+)?)% ± [\d.]+% behind",  # the present tense: the current figure
        r"at 20 bytes per parameter (\d+\.\d+)%",
    ],
    "decoupled's gap to dp at equal tokens, shared hardware (docs/benchmarks.md)": [
        r"\| decoupled \| \d\.\d+ ± \d\.\d+ \| \+(\d+\.\d+)%",
        r"decoupled was (\d+\.\d+)% behind tuned dp",
    ],
    "decoupled against dp at equal wall time, dedicated hardware": [
        r"equal wall time: against dp[^|]*\| \*\*([−+-]\d+\.\d+)%",
        r"\| decoupled, first run of each seed \| [\d.]+ ± [\d.]+ \| [^|]+ \| \*\*([−+-]\d+\.\d+)%",
    ],
    "tokens decoupled needs for dp's quality, worst point": [
        r"(\d\.\d+) ± [\d.]+ times dp's",
        r"\| decoupled, first run of each seed \| [\d.]+ ± [\d.]+ \|(?:[^|]*\|){3} (\d\.\d+) ±",
    ],
    "the default job's rate, bytes per second": [
        r"tokens\s+\d+ \((\d+) per second\)",
        r"\| default job \(H = 12[^|]*\|[^|]*\|[^|]*\|[^|]*\| ([\d,]+) \|",
        r"default\s+(?:run|job)\b[^.]{0,60}?\b(\d{1,3}(?:,\d{3})+|\d{4,}) bytes(?:/s| per second)",
    ],
    "the default job's held-out bits per byte": [
        r"bits per byte\s+(\d\.\d+) \+-",
        r"\| default job \(H = 12[^|]*\| (\d\.\d+) \|",
    ],
    "the longer job's bits per byte (examples/topologies/long.toml)": [
        r"long\.toml`\s*\([^)]*\),?\s*reaches\s+(\d\.\d+) bits per byte",
    ],
    "decoupled's held-out bits per byte under random kills (side_by_side)": [
        r"random kills[^|]*\| \*\*(\d\.\d+) ±",
        r"\| decoupled \| 0\.\d+ ± [\d.]+ \| 0\.\d+ ± [\d.]+ \| [\d,]+ ± [\d,]+ \| \*\*(\d\.\d+) ±",
    ],
    "decoupled's goodput under random kills (side_by_side)": [
        r"goodput / alive bound, same runs \| (\d\.\d+) /",
        r"\| decoupled \| (0\.\d+) ± [\d.]+ \| 0\.\d+ ± [\d.]+ \| [\d,]+ ±",
        r"goodput \((\d\.\d+) of \d\.\d+\)",
    ],
    "goodput / alive, reorder while a learner restarts": [
        r"reorder on one link while a learner restarts \(seeds 1-3\) \| (\d\.\d+)",
        r"reorder on learner 2, duplicate \(p 0\.5\) on learner 0, learner 1 restarting \| \*\*(\d\.\d+) ±",
        r"goodput (\d\.\d+) of the alive share",
    ],
    "syncer peak RSS, 64 learners against 8 (growth)": [
        r"\(\+(\d+\.\d+)%; it was \+291%\)",
        r"\(\*\*\+(\d+\.\d+)%\*\*, goal 10%\)",
    ],
    "syncer core cost per round, 1000 learners against 64": [
        r"(\d+\.\d+) ± [\d.]+ times \(it was 70",
        r"cost per round grows (\d+\.\d+) ±",
    ],
    "syncer core ms per round at 4000 learners": [
        r"at 4000 learners \| (\d+\.\d+) ± [\d.]+ ms",
        r"\| 4000 \| tiny \|[^|]*\| (\d+\.\d+) ±",
    ],
    "paper_table1: decoupled, 8 learners at 1.2M chips, simulated goodput %": [
        r"\| decoupled M = 8 \|(?: [\d.]+ \(\d+\) \|){3} (\d+\.\d) \(",
        r"and 8 do not \((\d+\.\d)%\)",
    ],
    "paper_table1: decoupled, 16 learners at 1.2M chips, simulated goodput %": [
        r"\| decoupled M = 16 \|(?: [\d.]+ \(\d+\) \|){3} (\d+\.\d) \(",
        r"16 learners reach 90% \((\d+\.\d)%\)",
    ],
    "paper_table1: the paper's goodput %, 8 learners at 1.2M chips": [
        r"\| decoupled M = 8 \|(?: [\d.]+ \(\d+\) \|){3} [\d.]+ \((\d+)\)",
        r"goodput (\d+)% for 8 learners",
    ],
    "paper_table1: the paper's goodput %, dp at 1.2M chips": [
        r"\| dp \(fitted\) \|(?: [\d.]+ \(\d+\) \|){3} [\d.]+ \((\d+)\)",
        r"against (\d+)% for plain data-parallel",
    ],
    "paper_table1: the paper's goodput %, elastic dp at 1.2M chips": [
        r"\| elastic dp \(fitted\) \|(?: [\d.]+ \(\d+\) \|){3} [\d.]+ \((\d+)\)",
        r"and (\d+)% for elastic data-parallel",
    ],
}


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def issue_mentions(pages):
    """(page, line, what) for every issue number in {page: text}."""
    out = []
    for page, text in pages.items():
        for m in ISSUE_NUMBER.finditer(text):
            out.append((page, line_of(text, m.start()),
                        f"\"{' '.join(m.group(0).split())}\": say what it is (\"the streaming merge\"), not which "
                        f"issue asked for it"))
    return out


def figure_decimals(value):
    exponent = decimal.Decimal(value).as_tuple().exponent
    return -exponent if exponent < 0 else 0


def figure_agrees(a, b):
    """Whether two copies of one figure agree: the more precise, rounded as the other is, is the other."""
    if figure_decimals(a) < figure_decimals(b):
        a, b = b, a
    step = decimal.Decimal(1).scaleb(-figure_decimals(b))
    return decimal.Decimal(a).quantize(step, rounding=decimal.ROUND_HALF_UP) == decimal.Decimal(b)


def figure_disagreements(pages, figures):
    """(page, line, what) for every copy of a figure in {page: text} that disagrees with the most
    precise copy, and for every pattern of `figures` that finds nothing."""
    out = []
    for name, patterns in figures.items():
        found = []  # (page, line, as written, value)
        for pattern in patterns:
            hits = 0
            for page, text in pages.items():
                for m in re.finditer(pattern, text.replace("\n", " ")):
                    written = m.group(1)
                    value = written.replace(",", "").replace("−", "-").lstrip("+")
                    found.append((page, line_of(text, m.start(1)), written, value))
                    hits += 1
            if not hits:
                out.append(("tests/docs/docs_check.py", 0,
                            f"FIGURES[{name!r}]: the pattern {pattern!r} finds nothing in README.md or "
                            f"docs/*.md: the wording changed; make it find the figure again"))
        if not found:
            continue
        ref = max(found, key=lambda f: figure_decimals(f[3]))  # the first of the most precise copies
        for page, line, written, value in found:
            if not figure_agrees(value, ref[3]):
                out.append((page, line, f"{name}: {written} here, {ref[2]} at {ref[0]}:{ref[1]}: one figure, one "
                                        f"value (or link to where it is measured)"))
    return out


def self_test():
    """The prose checks on pages made to fail; what each missed or got wrong, if anything."""
    problems = []
    pages = {"README.md": "Fixed in issue 25.\nSee Issues #3 and\nissue\n7.\n",
             "docs/a.md": "`atoll certs` reissues 3 certificates; as the issue says, 2 issues.\n"}
    got = [(p, l) for p, l, _ in issue_mentions(pages)]
    if got != [("README.md", 1), ("README.md", 2), ("README.md", 3)]:
        problems.append(f"issue numbers: found {got}, not README.md lines 1, 2 and 3 only")
    figures = {"rate": [r"rate (\d[\d,]*) per second", r"\| rate \| ([\d,]+) \|"],
               "bits": [r"reaches\s+(\d\.\d+) bits"],
               "gone": [r"never (\d+) here"]}
    pages = {"README.md": "a rate 21,450 per second, and it reaches 1.56 bits\n",
             "docs/a.md": "| rate | 17158 |\nreaches\n1.558 bits\n",
             "docs/b.md": "| rate | 21450 |\nit reaches 1.548 bits\n"}
    got = sorted((p, l, w.split(":")[0]) for p, l, w in figure_disagreements(pages, figures))
    want = [("docs/a.md", 1, "rate"), ("docs/b.md", 2, "bits"),
            ("tests/docs/docs_check.py", 0, "FIGURES['gone']")]
    if got != want:
        problems.append(f"figures: found {got}, not {want}")
    return problems


class Checker:
    def __init__(self, root, build):
        self.root = os.path.abspath(root)
        self.build = os.path.abspath(build)
        self.failures = []
        self.help_cache = {}
        self.subcommands = None
        self.commands = 0
        self.links = 0
        self.headings_cache = {}
        self.written = {}  # page -> the files its walk-through blocks write
        self.common_checked = 0

    def fail(self, path, line, what):
        self.failures.append(f"{os.path.relpath(path, self.root)}:{line}: {what}")

    # ---- the binary's help

    def atoll(self):
        return os.path.join(self.build, "atoll")

    def help_text(self, sub):
        if sub not in self.help_cache:
            argv = [self.atoll()] + ([sub] if sub else []) + ["--help"]
            try:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
                self.help_cache[sub] = out.stdout + out.stderr if out.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired) as e:
                self.help_cache[sub] = None
                print(f"docs_check: cannot run {' '.join(argv)}: {e}", file=sys.stderr)
        return self.help_cache[sub]

    def known_subcommands(self):
        if self.subcommands is None:
            text = self.help_text("") or ""
            self.subcommands = set()
            in_list = False
            for line in text.splitlines():
                if line.startswith("Subcommands:"):
                    in_list = True
                    continue
                if in_list:
                    m = re.match(r"\s+([a-z][a-z-]*)\s", line + " ")
                    if m:
                        self.subcommands.add(m.group(1))
                    elif line.strip():
                        in_list = False
        return self.subcommands

    def options(self, sub):
        """{long name: (names as written, help text)} of `atoll SUB --help`'s Options section.

        CLI11 writes each option as "  NAMES[ TYPE[=DEFAULT]...]", padded to the
        description column (that of -h,--help's "Print this help message"); a
        name part that reaches the column puts the description on the next line,
        and a description of several lines goes on at the column.
        """
        text = self.help_text(sub)
        if text is None:
            return None
        lines = text.split("\n")
        try:
            start = next(i for i, l in enumerate(lines) if l.strip().lower() == "options:")
        except StopIteration:
            return {}
        column = next((l.index("Print this help message") for l in lines[start:] if "Print this help" in l), 30)
        entries, current = [], None
        section = []
        for line in lines[start + 1:]:
            if not line.strip():
                break
            section.append(line)
        for i, line in enumerate(section):
            continued = i + 1 < len(section) and section[i + 1].startswith(" " * column)
            if line.startswith("  -"):
                # The name part is single-spaced: a wider gap is the padding before the
                # description. Padded by one space only, the line is the same as a long
                # name part with a space at the column; that one has its description on
                # the next line.
                if "  " in line[2:].rstrip() or (len(line) > column and line[column - 1] == " " and
                                                  line[column] != " " and not continued):
                    head, desc = line[:column], line[column:]
                else:
                    head, desc = line, ""
                current = [head.strip(), [desc.strip()] if desc.strip() else []]
                entries.append(current)
            elif current is not None and line.startswith(" " * column):
                current[1].append(line.strip())
        out = {}
        for head, desc in entries:
            names = head.split()[0]
            longs = [n for n in names.split(",") if n.startswith("--")]
            key = longs[0] if longs else names
            out[key] = (names, " ".join(desc))
        return out

    def check_common_flags(self):
        """Every subcommand's help against COMMON_FLAGS (see the module's doc)."""
        subs = sorted(self.known_subcommands())
        helps = {}
        for sub in subs:
            opts = self.options(sub)
            if opts is None:
                self.failures.append(f"{self.atoll()}: cannot read `atoll {sub} --help`")
                continue
            helps[sub] = opts

        def where(sub):
            f = os.path.join("cli", f"{sub}_command.cc")
            return f if os.path.isfile(os.path.join(self.root, f)) else os.path.join("cli", "atoll.cc")

        by_long = {}
        for names in COMMON_FLAGS:
            by_long[[n for n in names.split(",") if n.startswith("--")][0]] = names
        for names, wanted in COMMON_FLAGS.items():
            long = [n for n in names.split(",") if n.startswith("--")][0]
            for sub in wanted:
                if sub not in self.known_subcommands():
                    self.failures.append(f"tests/docs/docs_check.py: COMMON_FLAGS lists atoll {sub} for {names}, "
                                         f"but there is no such subcommand")
            having = [sub for sub in subs if sub in helps and long in helps[sub]
                      and (sub, long) not in OTHER_MEANINGS]
            common = ", ".join(wanted)
            for sub in wanted:
                if sub in helps and sub not in having:
                    self.failures.append(f"{where(sub)}: atoll {sub} has no {names}, which {common} take alike "
                                         f"(declare it with the shared function, cli/command.h)")
            for sub in having:
                if sub not in wanted:
                    self.failures.append(f"{where(sub)}: atoll {sub} offers {long}, but COMMON_FLAGS in "
                                         f"tests/docs/docs_check.py does not list {sub} for it (add it there, or "
                                         f"to OTHER_MEANINGS with why it means something else)")
                shown = helps[sub][long][0]
                if shown != names:
                    self.failures.append(f"{where(sub)}: atoll {sub} names it {shown}, not {names} as the others do")
            if long in WORDED_PER_SIDE or len(having) < 2:
                continue
            # The text most of them show (ties: the first listed) is the common one.
            texts = [helps[sub][long][1] for sub in having]
            order = {sub: i for i, sub in enumerate(wanted)}
            ranked = sorted(having, key=lambda sub: (-texts.count(helps[sub][long][1]), order.get(sub, len(order))))
            reference = ranked[0]
            common_text = helps[reference][long][1]
            for sub in having:
                text = helps[sub][long][1]
                if text != common_text:
                    self.failures.append(f"{where(sub)}: atoll {sub} {names} says \"{text}\", not the common "
                                         f"\"{common_text}\" (atoll {reference}): declare it with the shared "
                                         f"function, cli/command.h")
        # An option two subcommands offer, neither common nor another meaning: a new drift.
        offered = {}
        for sub, opts in helps.items():
            for long in opts:
                if long in BUILT_IN_FLAGS or long in by_long or (sub, long) in OTHER_MEANINGS:
                    continue
                offered.setdefault(long, []).append(sub)
        for long, which in sorted(offered.items()):
            if len(which) > 1:
                self.failures.append(f"{where(which[0])}: {long} is offered by atoll {', '.join(which)}: make it "
                                     f"one common option (COMMON_FLAGS in tests/docs/docs_check.py, declared once "
                                     f"in cli/) or list it in OTHER_MEANINGS with why it differs")
        for (sub, long), why in OTHER_MEANINGS.items():
            if sub in helps and long not in helps[sub]:
                self.failures.append(f"tests/docs/docs_check.py: OTHER_MEANINGS names atoll {sub} {long} ({why}), "
                                     f"which `atoll {sub} --help` does not offer")
        self.common_checked = sum(len(w) for w in COMMON_FLAGS.values())

    # ---- code blocks

    def code_lines(self, path):
        """(line number, command text) for every command line of a checked block."""
        lines = open(path, encoding="utf-8").read().split("\n")
        out = []
        fence = None  # (marker, type) while inside a block
        pending, pending_line = "", 0
        for n, raw in enumerate(lines, 1):
            stripped = raw.strip()
            if fence is None:
                m = re.match(r"(`{3,}|~{3,})\s*([A-Za-z0-9_+-]*)", stripped)
                if m:
                    fence = (m.group(1), m.group(2).lower())
                continue
            if stripped.startswith(fence[0]) and stripped.strip("`~") == "":
                fence = None
                pending = ""
                continue
            if fence[1] not in CODE_TYPES:
                continue
            text = stripped
            if fence[1] == "console" and not pending:
                if not text.startswith("$ "):
                    continue
                text = text[2:]
            elif not pending and text.startswith("$ "):
                text = text[2:]
            if not pending:
                pending_line = n
            if text.endswith("\\"):
                pending += text[:-1] + " "
                continue
            pending += text
            if pending.strip() and not pending.lstrip().startswith("#"):
                out.append((pending_line, pending))
            pending = ""
        return out

    @staticmethod
    def split_commands(line):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError as e:
            return None, str(e)
        commands, current, skip_next = [], [], False
        for tok in tokens:
            if skip_next:  # the target of a redirection: written, not read
                skip_next = False
                continue
            if tok and set(tok) <= set(";&|()"):
                if current:
                    commands.append(current)
                current = []
            elif tok and set(tok) <= set("<>") or tok in ("2>", "&>"):
                skip_next = True
            else:
                current.append(tok)
        if current:
            commands.append(current)
        return commands, None

    def is_allowed(self, word):
        return any(fnmatch.fnmatch(word, pat) or fnmatch.fnmatch(word + "/", pat) for pat in ALLOWED_PATHS)

    @staticmethod
    def looks_like_path(word):
        if not word or word.startswith("-") or "://" in word or word.startswith("/") or word.startswith("$"):
            return False
        if re.fullmatch(r"[\w.-]+:\d+", word):  # HOST:PORT
            return False
        if re.fullmatch(r"\d+/\d+", word):  # a fraction, e.g. --shard 0/2
            return False
        if any(c in word for c in "{}[]=,'\""):  # a TOML value or a list, not a path
            return False
        return "/" in word or word.endswith(PATH_SUFFIXES)

    @staticmethod
    def page_files(path):
        """Files a page's own code blocks write: a block whose first line is `# NAME.EXT` (a walk-through)."""
        names, fence, first = set(), None, False
        for raw in open(path, encoding="utf-8").read().split("\n"):
            stripped = raw.strip()
            m = re.match(r"(`{3,}|~{3,})", stripped)
            if m and (fence is None or (stripped.startswith(fence) and stripped.strip("`~") == "")):
                fence, first = (m.group(1), True) if fence is None else (None, False)
                continue
            if fence is not None and first:
                named = re.fullmatch(r"#\s*([\w.-]+\.\w+)", stripped)
                if named:
                    names.add(named.group(1))
                first = False
        return names

    def check_path(self, path, line, word):
        w = word[2:] if word.startswith("./") else word
        if self.is_allowed(w) or w in self.written.get(path, ()):
            return
        if w == "build" or w.startswith("build/"):
            base, rel = self.build, w[len("build/"):] if w != "build" else ""
        else:
            base, rel = self.root, w
        target = os.path.join(base, rel)
        if any(c in rel for c in "*?["):
            if not glob.glob(target):
                self.fail(path, line, f"no file matches {word}")
        elif not os.path.exists(target):
            where = "the build folder" if base == self.build else "the repository"
            self.fail(path, line, f"{word}: not in {where}")

    def check_command(self, path, line, words):
        # Leading VAR=value assignments: their values may name paths.
        while words and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            value = words[0].split("=", 1)[1]
            for part in value.split(":"):
                if self.looks_like_path(part):
                    self.check_path(path, line, part)
            words = words[1:]
        if not words:
            return
        program = words[0]
        if self.looks_like_path(program):
            self.check_path(path, line, program)
        skip = False
        for i, w in enumerate(words[1:], 1):
            if skip:
                skip = False
                continue
            if w in OUTPUT_FLAGS:
                skip = True
                continue
            if w.startswith("--") and "=" in w:
                flag, value = w.split("=", 1)
                if flag in OUTPUT_FLAGS:
                    continue
                w = value
            if self.looks_like_path(w):
                self.check_path(path, line, w)
        if program in ATOLL_PROGRAMS:
            self.check_atoll(path, line, words[1:])

    def check_atoll(self, path, line, args):
        sub = ""
        if args and not args[0].startswith("-"):
            sub = args[0]
            if sub not in self.known_subcommands():
                self.fail(path, line, f"atoll {sub}: no such subcommand in `{self.atoll()} --help`")
                return
        text = self.help_text(sub)
        if text is None:
            self.fail(path, line, f"cannot read `atoll {sub} --help` from {self.atoll()}")
            return
        given = {re.sub(r"=.*", "", a) for a in args if a.startswith("--")}
        offered = set(re.findall(r"--[a-z][a-z0-9-]*", text))
        for flag in sorted(given - offered):
            self.fail(path, line, f"atoll {sub} {flag}: not an option of `atoll {sub} --help`".replace("  ", " "))

    # ---- links

    @staticmethod
    def slug(heading):
        s = heading.strip().lower()
        s = re.sub(r"`", "", s)
        s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)  # a link in a heading keeps its text
        s = re.sub(r"[^\w\- ]", "", s)
        return s.replace(" ", "-")

    def headings(self, md):
        if md not in self.headings_cache:
            slugs, seen, fence = set(), {}, None
            for raw in open(md, encoding="utf-8").read().split("\n"):
                stripped = raw.strip()
                m = re.match(r"(`{3,}|~{3,})", stripped)
                if m:
                    fence = None if fence and stripped.startswith(fence) else (fence or m.group(1))
                    continue
                if fence:
                    continue
                h = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", raw)
                if h:
                    base = self.slug(h.group(1))
                    n = seen.get(base, 0)
                    seen[base] = n + 1
                    slugs.add(base if n == 0 else f"{base}-{n}")
            self.headings_cache[md] = slugs
        return self.headings_cache[md]

    def check_links(self, path):
        fence = None
        for n, raw in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
            stripped = raw.strip()
            m = re.match(r"(`{3,}|~{3,})", stripped)
            if m:
                fence = None if fence and stripped.startswith(fence) else (fence or m.group(1))
                continue
            if fence:
                continue
            text = re.sub(r"`[^`]*`", "", raw)  # inline code is not a link
            targets = re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)
            ref = re.match(r"\s*\[[^\]]+\]:\s*(\S+)", text)
            if ref:
                targets.append(ref.group(1))
            for target in targets:
                self.links += 1
                self.check_link(path, n, target)

    def check_link(self, path, line, target):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            return
        file_part, _, anchor = target.partition("#")
        if file_part:
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            if not os.path.exists(dest):
                self.fail(path, line, f"link {target}: {os.path.relpath(dest, self.root)} does not exist")
                return
        else:
            dest = path
        if anchor and dest.endswith(".md") and os.path.isfile(dest):
            if anchor not in self.headings(dest):
                self.fail(path, line, f"link {target}: no heading #{anchor} in {os.path.relpath(dest, self.root)}")

    # ---- all of it

    def run(self):
        pages = [os.path.join(self.root, "README.md")] + sorted(glob.glob(os.path.join(self.root, "docs", "*.md")))
        if not os.access(self.atoll(), os.X_OK):
            self.failures.append(f"{self.atoll()}: no atoll executable in the build folder")
        else:
            self.check_common_flags()
        for page in pages:
            if not os.path.isfile(page):
                self.failures.append(f"{os.path.relpath(page, self.root)}: missing")
                continue
            self.written[page] = self.page_files(page)
            for line, text in self.code_lines(page):
                commands, error = self.split_commands(text)
                if error:
                    self.fail(page, line, f"cannot parse the command ({error}): {text}")
                    continue
                for words in commands:
                    self.commands += 1
                    self.check_command(page, line, words)
            self.check_links(page)
        for what in self_test():
            self.failures.append(f"tests/docs/docs_check.py: self-test: {what}")
        prose = {os.path.relpath(p, self.root): open(p, encoding="utf-8").read() for p in pages if os.path.isfile(p)}
        for page, line, what in issue_mentions(prose) + figure_disagreements(prose, FIGURES):
            self.failures.append(f"{page}:{line}: {what}" if line else f"{page}: {what}")
        for f in self.failures:
            print(f)
        print(f"docs_check: {len(pages)} pages, {self.commands} commands, {self.links} links, "
              f"{len(COMMON_FLAGS)} common options in {self.common_checked} places, {len(FIGURES)} figures, "
              f"{len(self.failures)} failures")
        return 1 if self.failures else 0


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    return Checker(argv[1], argv[2]).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
