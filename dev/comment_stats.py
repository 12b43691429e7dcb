#!/usr/bin/env python3
"""How much of llmc/ is comment, for issue 39's "code comments describe the code": prints the
longest comment block under llmc/ (file:first-last lines), comment lines per code line of the
files named on the command line (default llmc/cuda/attention.cu and llmc/ops/ops.h), and the
files whose opening comment is longer than 25 lines.

A comment line holds only a comment (// or part of a /* */); a code line holds any code (a
trailing comment does not make it a comment line); blank lines count as neither. A block is a run
of consecutive comment lines; the opening comment is the block on a file's first non-blank line.

  python3 dev/comment_stats.py [FILE...]
"""
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
EXTS = (".c", ".h", ".cu", ".cuh", ".cpp")
OPENING_MAX = 25


def classify(text):
    """One of 'blank', 'comment', 'code' per line of a C/CUDA source."""
    kinds = []
    in_block = False
    for line in text.split("\n"):
        has_code = has_comment = False
        i, n = 0, len(line)
        quote = None
        while i < n:
            c = line[i]
            if in_block:
                has_comment = True
                if line.startswith("*/", i):
                    in_block = False
                    i += 2
                    continue
            elif quote:
                has_code = True
                if c == "\\":
                    i += 1
                elif c == quote:
                    quote = None
            elif line.startswith("//", i):
                has_comment = True
                break
            elif line.startswith("/*", i):
                in_block = True
                has_comment = True
                i += 2
                continue
            elif c in "\"'":
                quote = c
                has_code = True
            elif not c.isspace():
                has_code = True
            i += 1
        kinds.append("code" if has_code else "comment" if has_comment else "blank")
    return kinds


def blocks(kinds):
    """(first, last) line numbers, 1-based, of each run of comment lines."""
    out, start = [], None
    for i, k in enumerate(kinds + ["end"]):
        if k == "comment" and start is None:
            start = i
        elif k != "comment" and start is not None:
            out.append((start + 1, i))
            start = None
    return out


def opening_len(kinds):
    for i, k in enumerate(kinds):
        if k == "blank":
            continue
        if k != "comment":
            return 0
        j = i
        while j < len(kinds) and kinds[j] == "comment":
            j += 1
        return j - i
    return 0


def sources():
    for d, _, files in sorted(os.walk(os.path.join(ROOT, "llmc"))):
        for f in sorted(files):
            if f.endswith(EXTS):
                p = os.path.join(d, f)
                yield os.path.relpath(p, ROOT), p


def main():
    longest = (0, "", 0, 0)
    over = []
    for rel, p in sources():
        kinds = classify(open(p, encoding="utf-8").read())
        for a, b in blocks(kinds):
            if b - a + 1 > longest[0]:
                longest = (b - a + 1, rel, a, b)
        n = opening_len(kinds)
        if n > OPENING_MAX:
            over.append((n, rel))
    print(f"longest comment block in llmc/: {longest[1]}:{longest[2]}-{longest[3]} ({longest[0]} lines)")
    for rel in sys.argv[1:] or ["llmc/cuda/attention.cu", "llmc/ops/ops.h"]:
        kinds = classify(open(os.path.join(ROOT, rel), encoding="utf-8").read())
        com, code = kinds.count("comment"), kinds.count("code")
        print(f"{rel}: {com} comment lines, {code} code lines, {com / max(code, 1):.2f} per code line")
    print(f"files in llmc/ with an opening comment over {OPENING_MAX} lines: {len(over)}")
    for n, rel in sorted(over, reverse=True):
        print(f"  {n:4d}  {rel}")


if __name__ == "__main__":
    main()
