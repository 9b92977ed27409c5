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
  - every relative markdown link resolves to an existing file or folder, and
    a #section of a markdown file names one of its headings.
Prints each failure as FILE:LINE: what, and exits 1 if there was any.
Standard library only.
"""

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
}

# Flags whose value is something a command creates, never an input to check.
OUTPUT_FLAGS = {"--report", "--out", "--tapes", "--tape", "--plot", "--port-file", "--save-model",
                "--tls-dir", "--build", "-B", "--prefix", "--test-dir"}

PATH_SUFFIXES = (".toml", ".py", ".sh", ".md", ".json", ".jsonl", ".csv", ".svg", ".pt", ".cc", ".h",
                 ".capnp", ".txt", ".pem", ".key")

ATOLL_PROGRAMS = {"atoll", "./build/atoll", "build/atoll"}


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

    def check_path(self, path, line, word):
        w = word[2:] if word.startswith("./") else word
        if self.is_allowed(w):
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
        for page in pages:
            if not os.path.isfile(page):
                self.failures.append(f"{os.path.relpath(page, self.root)}: missing")
                continue
            for line, text in self.code_lines(page):
                commands, error = self.split_commands(text)
                if error:
                    self.fail(page, line, f"cannot parse the command ({error}): {text}")
                    continue
                for words in commands:
                    self.commands += 1
                    self.check_command(page, line, words)
            self.check_links(page)
        for f in self.failures:
            print(f)
        print(f"docs_check: {len(pages)} pages, {self.commands} commands, {self.links} links, "
              f"{len(self.failures)} failures")
        return 1 if self.failures else 0


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    return Checker(argv[1], argv[2]).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
