#!/usr/bin/env bash
# The documents in docs/ stay current with the code, and the repository stands alone:
#   1. every flag of `train_gpt2 --help` and `train_lora --help` has a row in the flag table of
#      docs/ARCHITECTURE.md;
#   2. every file a row names exists, and every function it names in backticks is defined in one
#      of the row's files;
#   3. the file map of docs/ARCHITECTURE.md names every source file of llmc/ and the programs;
#   4. no file points readers to a design or formats document outside docs/, or to the shared
#      folder beside the repository;
#   5. every repository path a comment under llmc/ names (llmc/..., mk/..., docs/..., test/...,
#      dev/..., scripts/..., data/...) exists, and the check finds a path planted in a temporary
#      file, so that it cannot pass by finding no paths at all.
set -u
cd "$(dirname "$0")/.."
BIN_DIR="${BIN_DIR:-.}"
DOC=docs/ARCHITECTURE.md
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# the flag table: rows from the "## Flags" heading to the next heading
flag_rows=$(awk '/^## Flags/ {on=1; next} /^## / {on=0} on && /^\| `/' "$DOC")
[ "$(wc -l <<<"$flag_rows")" -ge 30 ] || bad "$DOC: found only $(wc -l <<<"$flag_rows") rows in the flag table"

# ---- 1
for prog in train_gpt2 train_lora; do
  [ -x "$BIN_DIR/$prog" ] || { bad "$BIN_DIR/$prog not built"; continue; }
  flags=$("$BIN_DIR/$prog" --help | grep -oE '^  (-[a-z]+, )?--[a-z0-9-]+' | grep -oE -- '--[a-z0-9-]+' | sort -u)
  [ "$(wc -l <<<"$flags")" -ge 30 ] || bad "$prog --help: found only $(wc -l <<<"$flags") flags"
  for f in $flags; do
    grep -qF -- "\`$f\`" <<<"$flag_rows" || bad "$DOC: no row for $prog's $f"
  done
done
[ $fail -eq 0 ] && echo "ok   every trainer flag has a row in $DOC"

# ---- 2
n_checked=0
while IFS= read -r row; do
  impl=${row#*|}; impl=${impl#*|}           # the second column
  files=$(grep -oE '`[a-z0-9_/]+\.(c|cu|h)`' <<<"$impl" | tr -d '`')
  paths=()
  for f in $files; do
    p="llmc/$f"
    [ -f "$p" ] || { bad "$DOC: '$f' (row: ${row:0:60}...) is not a file of llmc/"; continue; }
    paths+=("$p")
  done
  for fn in $(grep -oE '`[a-z][a-z0-9]*_[a-z0-9_]*`' <<<"$impl" | tr -d '`'); do
    [ ${#paths[@]} -gt 0 ] || break
    grep -qE "(^|[^a-z0-9_])$fn\(" "${paths[@]}" || bad "$DOC: '$fn' is not in ${paths[*]}"
    n_checked=$((n_checked + 1))
  done
done <<<"$flag_rows"
[ "$n_checked" -ge 20 ] || bad "$DOC: checked only $n_checked function names"
[ $fail -eq 0 ] && echo "ok   the flag table's files exist and hold the $n_checked functions it names"

# ---- 3
map=$(awk '/^## File map/ {on=1; next} /^## / {on=0} on' "$DOC")
# "llmc/x.h/.c" names x.h and x.c
named=$(grep -oE '`[A-Za-z0-9_./]+`' <<<"$map" | tr -d '`' |
        sed -E 's#^(.*)\.h/\.c$#\1.h\n\1.c#' | xargs -n1 basename | sort -u)
sources=$(find llmc -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \))
[ "$(wc -l <<<"$sources")" -ge 100 ] || bad "found only $(wc -l <<<"$sources") source files under llmc/ (moved?)"
for f in $sources ./*.cu data/prepare.c; do
  grep -qxF "$(basename "$f")" <<<"$named" || bad "$DOC: the file map does not name $f"
done
[ $fail -eq 0 ] && echo "ok   the file map names every source file"

# ---- 4
refs=$(git grep -nE 'DESIGN\.md|FORMATS\.md|\.\./shared' -- . ':!test/lint_docs.sh' | grep -vE 'docs/FORMATS\.md|\]\(FORMATS\.md\)')
[ -z "$refs" ] || bad "references to documents outside the repository:"$'\n'"$refs"
[ $fail -eq 0 ] && echo "ok   every reference to a document points into docs/"


# ---- 5
# comment_paths FILE...: prints "file:line: path" for each path named in a comment of the C/CUDA
# files that is not in the repository, and fails if there is one. A path passes when it is a file
# or folder of the repository, a glob that matches one, a program built from path.c or path.cu
# (data/prepare), or a place git ignores (a run's outputs, the user's data under data/mine/).
comment_paths() {
  python3 - "$@" <<'PY'
import glob, os, re, subprocess, sys

PATH = re.compile(r"(?<![A-Za-z0-9_./-])((?:llmc|mk|docs|test|dev|scripts|data)/[A-Za-z0-9_.*/-]*[A-Za-z0-9_*/])")

def comments(text):
    """(line number, text) of each comment line of a C/CUDA source; strings are skipped."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1; i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i); j = n if j < 0 else j
            yield line, text[i:j]; i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2); j = n if j < 0 else j + 2
            for k, part in enumerate(text[i:j].split("\n")):
                yield line + k, part
            line += text.count("\n", i, j); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] not in (c, "\n"):
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1

def in_repo(p):
    p = p.rstrip("/")
    if glob.glob(p) or any(os.path.isfile(p + ext) for ext in (".c", ".cu")):
        return True
    return subprocess.run(["git", "check-ignore", "-q", p]).returncode == 0

missing = 0
for f in sys.argv[1:]:
    for ln, text in comments(open(f, encoding="utf-8").read()):
        for p in PATH.findall(text):
            if not in_repo(p):
                print(f"{f}:{ln}: {p}")
                missing += 1
sys.exit(1 if missing else 0)
PY
}

planted=$(mktemp --suffix=.c)
printf '// see llmc/ops/ops.h and mk/config.mk\nint x; /* and llmc/ops/no_such_file.h */\n' > "$planted"
got=$(comment_paths "$planted"); rc=$?
rm -f "$planted"
[ $rc -ne 0 ] && [ "$got" = "$planted:2: llmc/ops/no_such_file.h" ] ||
  bad "the comment path check does not find exactly the path planted in a temporary file (got: '$got')"
missing=$(comment_paths $(find llmc -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)) ||
  bad "comments under llmc/ name paths that are not in the repository:"$'\n'"$missing"
[ $fail -eq 0 ] && echo "ok   every repository path a comment under llmc/ names exists"

exit $fail
