#!/usr/bin/env bash
# The documents in docs/ stay current with the code, and the repository stands alone:
#   1. every flag of `train_gpt2 --help` and `train_lora --help` has a row in the flag table of
#      docs/ARCHITECTURE.md;
#   2. every file a row names exists, and every function it names in backticks is defined in one
#      of the row's files;
#   3. the file map of docs/ARCHITECTURE.md names every source file of llmc/ and the programs;
#   4. no file points readers to a design or formats document outside docs/, or to the shared
#      folder beside the repository.
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

exit $fail
