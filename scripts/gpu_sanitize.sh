#!/usr/bin/env bash
# One compute-sanitizer item of scripts/gpu_check.sh: run a test program under one tool and judge
# the findings by whose kernel they are in.
#
#   scripts/gpu_sanitize.sh SANITIZER TOOL PROGRAM
#
# The sanitizer writes its reports to a file of their own (--log-file), so the program's output
# cannot split them; up to PRINT_LIMIT reports are printed and every one is classified by
# `scripts/gpu_report.py --sanitizer-verdict`: a report inside a cuBLAS / cuBLASLt / NCCL kernel
# (nvjet_*, cutlass*, sm90_xmma*, ncclDevKernel*, ...) is a library finding, listed with its kernel
# name, and does not fail the item; any report in one of our kernels, an API error or a leak fails
# it, and so does a failing test program or more reports than were printed (whose they are is
# unknown). The environment passes through (TEST_QUICK=1 selects a test program's small subset).
# Prints the program's output, the head of the sanitizer's log, then one line
# "sanitizer_verdict {JSON}" that the report reads. Exit 0 when the item passes.
set -u
[ $# -eq 3 ] || { echo "usage: scripts/gpu_sanitize.sh SANITIZER TOOL PROGRAM" >&2; exit 2; }
CS=$1 TOOL=$2 PROG=$3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PRINT_LIMIT=${PRINT_LIMIT:-10000}
LOG=$(mktemp "${TMPDIR:-/tmp}/sanitizer.XXXXXX")
trap 'rm -f "$LOG"' EXIT
extra=()
[ "$TOOL" = memcheck ] && extra=(--leak-check full)
"$CS" --tool "$TOOL" "${extra[@]}" --print-limit "$PRINT_LIMIT" --log-file "$LOG" "$PROG"
rc=$?
echo "== compute-sanitizer --tool $TOOL: $(grep -c . "$LOG") lines of reports (the first 120 KB below)"
head -c 122880 "$LOG"
echo
"${PYTHON:-python3}" "$ROOT/scripts/gpu_report.py" --sanitizer-verdict "$TOOL" "$LOG" "$rc"
