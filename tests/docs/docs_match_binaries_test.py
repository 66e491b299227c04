#!/usr/bin/python3
"""The docs say what the binaries do, checked against the binaries and the code:

1. every binary answers --help with exit 0, and every flag its --help names appears in the doc
   that documents that binary;
2. every line the operator guide quotes from a log or from stdout exists in the code: each quoted
   line (or the start of one) must fit a string literal of the sources, where `{}` or `%s` in a
   format string and `...` in the quote stand for any text.

usage: docs_match_binaries_test.py BIN_DIR SOURCE_DIR
Prints every mismatch and exits 1 when there is one.
"""
import functools
import pathlib
import re
import subprocess
import sys

# Binary -> the docs that document it (a flag may be in any of them). --help itself is exempt.
DOCS = {
    "zk-agent": ["agent.md", "operator-guide.md"],
    "zk-agentctl": ["agent.md", "operator-guide.md"],
    "fencing-gateway": ["gateway.md"],
    "zk-device": ["device.md"],
    "zk-presence-watch": ["gateway.md", "presence-runtime.md"],
    "zk-elect": ["election.md"],
    "zk-token": ["auth.md"],
    "presence-experiments": ["presence.md"],
    "presence-e2e": ["presence.md"],
    "chaos-runner": ["testing.md"],
}

# Inline code in the operator guide that is not a line our processes print.
COMMANDS = {"systemctl", "journalctl", "zk-agentctl", "zk-agent", "promtool", "cpack", "cmake",
            "ctest", "df", "echo", "GET", "POST", "PUT", "curl", "apt-get"}
NOT_OURS = {"fsync-ing the write ahead log ... took"}  # ZooKeeper's own log
SOURCE_DIRS = ["agent", "gateway", "election", "fencing", "http", "presence", "device",
               "logging", "config", "auth"]


def help_flags(binary):
    run = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=30)
    text = run.stdout + run.stderr
    return run.returncode, sorted(set(re.findall(r"--[a-z][a-z0-9-]*", text)) - {"--help"})


def inline_code(markdown):
    """Inline code spans outside fenced blocks, whitespace runs (line breaks) made one space."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", text)]


def quoted_lines(markdown):
    out = []
    for span in inline_code(markdown):
        words = span.split()
        if len(words) < 2 or words[0] in COMMANDS or span in NOT_OURS:
            continue
        if words[0].startswith(("-", "zkagent_")) or words[0] == "up":
            continue
        if any(mark in span for mark in ("(", "{", "==", " > ", ": true", ": null", "/v1/")):
            continue  # metric expressions, config and JSON values, HTTP paths
        out.append(span)
    return out


def code_patterns(source_dir):
    """Every C++ string literal that starts with fixed text, as a glob: `{...}` and printf
    placeholders become '*', and a trailing '*' lets a literal stand for the start of a line
    printed piece by piece."""
    patterns = set()
    literal = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
    for folder in SOURCE_DIRS:
        for path in (source_dir / folder).rglob("*.[ch]pp"):
            for text in literal.findall(path.read_text(errors="replace")):
                text = text.replace('\\"', '"').replace("\\n", "")
                if len(text.split()) < 2 and not text.endswith(" "):
                    continue
                glob = re.sub(r"\{[^{}]*\}|%[-+ #0-9.]*[a-z]+", "\0", text) + "\0"
                if "\0" not in glob[:3]:  # a line starting with a value would fit any quote
                    patterns.add(glob)
    return patterns


def compatible(a, b):
    """True when some text matches both globs ('\\0' matches any text, also empty)."""

    @functools.lru_cache(maxsize=None)
    def match(i, j):
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i] == "\0":
            return match(i + 1, j) or (j < len(b) and match(i, j + 1))
        if j < len(b) and b[j] == "\0":
            return match(i, j + 1) or (i < len(a) and match(i + 1, j))
        return i < len(a) and j < len(b) and a[i] == b[j] and match(i + 1, j + 1)

    return match(0, 0)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    bin_dir, source = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    problems = []
    for binary, docs in DOCS.items():
        code, flags = help_flags(bin_dir / binary)
        if code != 0:
            problems.append(f"{binary} --help exits {code}")
        text = "".join((source / "docs" / doc).read_text() for doc in docs)
        for flag in flags:
            if not re.search(re.escape(flag) + r"(?![a-z0-9-])", text):
                problems.append(f"{binary} {flag}: in --help, not in docs/{' or docs/'.join(docs)}")
    patterns = code_patterns(source)
    guide = (source / "docs" / "operator-guide.md").read_text()
    quotes = quoted_lines(guide)
    for quote in quotes:
        glob = quote.replace("...", "\0") + "\0"  # a quote may show the start of a line
        if not any(compatible(glob, pattern) for pattern in patterns):
            problems.append(f"docs/operator-guide.md quotes `{quote}`: no string in the code prints it")
    for problem in problems:
        print(problem)
    print(f"{len(DOCS)} binaries, {len(quotes)} quoted lines checked; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
