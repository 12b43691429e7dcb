#!/usr/bin/env bash
# Every function in llmc/ (C, CUDA, headers) fits on a screen: at most 80 lines from the first line
# of its signature to its closing brace, unless the comment right above it says why it is longer
# with the words "Longer than a screen" (e.g. a kernel whose stages share registers); a function
# within the limit does not carry those words (a reason that no longer holds).
#   bash test/lint_functions.sh           the check (make test)
#   bash test/lint_functions.sh --list    every function over the limit, marked or not
# Functions are found by their braces at file level (comments, strings and preprocessor lines
# set aside): a '{' at depth 0 after a ')' opens a function body; struct, enum, namespace and
# extern "C" blocks and initializers are not functions (functions inside a struct are not read).
set -u
cd "$(dirname "$0")/.."
LIMIT=${LIMIT:-80}
python3 - "$LIMIT" "${1:-}" $(find llmc -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | sort) <<'PY'
import re, sys

limit, mode, files = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
MARK = "longer than a screen"

def code_only(text):
    """text with comments, string / char literals and preprocessor lines blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c); i += 1; continue
        if line_start and c == "#":                      # a preprocessor line and its continuations
            while i < n and not (text[i] == "\n" and text[i - 1] != "\\"):
                out.append("\n" if text[i] == "\n" else " "); i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n": out.append(" "); i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2); j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j, n - 1) + 1 - i)); i = j + 1
        else:
            out.append(c); i += 1
            if c == "\n": line_start = True
    return "".join(out)

NOT_FUNC = re.compile(r"^\s*(typedef\b|struct\b|union\b|enum\b|class\b|namespace\b|extern\s*$)")

def functions(path):
    text = open(path, encoding="utf-8").read()
    code = code_only(text)
    lines = text.split("\n")
    depth, head, head_line, in_func, start = 0, "", None, False, 0
    line = 1
    for c in code:
        if c == "\n":
            line += 1
            if depth == 0 and head.strip(): head += " "
            continue
        if depth == 0:
            if c == "{":
                h = head.strip()
                if re.search(r"\)\s*(const\b\s*)?(noexcept\b\s*)?$", re.sub(r"__attribute__\s*\(\(.*?\)\)|__launch_bounds__\s*\(.*?\)", "", h)) \
                        and not NOT_FUNC.search(h) and "=" not in h.split("(")[0]:
                    in_func, start, depth = True, head_line, 1
                elif re.search(r'extern\s*$|namespace\b[^;]*$', h):
                    pass                                   # extern "C" { / namespace x {: transparent
                else:
                    depth = 1
                head, head_line = "", None
            elif c in ";}":
                head, head_line = "", None
            else:
                if not c.isspace() and head_line is None: head_line = line
                head += c
        else:
            if c == "{": depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    if in_func:
                        name = [w for w in re.findall(r"([A-Za-z_]\w*)\s*\(", " ".join(lines[start - 1:start + 3]))
                                if w not in ("__attribute__", "__launch_bounds__", "always_inline", "noinline")]
                        yield start, line, (name[0] if name else "?"), lines
                    in_func = False

def marked(lines, start):
    """whether the comment block right above line `start` (1-based) says why it is long"""
    i, block = start - 2, []
    while i >= 0 and (lines[i].strip().startswith("//") or lines[i].strip().startswith("template")):
        block.append(lines[i]); i -= 1
    return MARK in " ".join(block).lower()

bad = listed = 0
for path in files:
    for start, end, name, lines in functions(path):
        n = end - start + 1
        ok = marked(lines, start)
        if n <= limit:
            if ok and mode != "--list":
                bad += 1
                print(f"FAIL: {path}:{start}: {name} is {n} lines, yet the comment above it says it is longer than a screen")
            continue
        listed += 1
        if mode == "--list":
            print(f"{n:4d} {path}:{start} {name}{'  (says why)' if ok else ''}")
        elif not ok:
            bad += 1
            print(f"FAIL: {path}:{start}: {name} is {n} lines (> {limit}): split it, or say why in a comment "
                  f"right above it that contains 'Longer than a screen'")
if mode != "--list":
    if bad: sys.exit(1)
    print(f"ok   every function in llmc/ is at most {limit} lines or says why ({listed} say why)")
PY
