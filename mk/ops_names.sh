#!/usr/bin/env bash
# The names of every function llmc/ops.h declares, one per line: the single source for the list of
# op symbols (mk/cudakern.mk renames them to cpu_<name> in copies of the CPU backend's objects,
# and test/test_cuda_ops.cpp declares those copies). A declaration is a line at column 0 of the
# form "<type> name(" (ops.h keeps every prototype's name on its first line).
#   mk/ops_names.sh llmc/ops.h            names
#   mk/ops_names.sh llmc/ops.h --syms     "name cpu_name" lines for objcopy --redefine-syms
#   mk/ops_names.sh llmc/ops.h --header   a header that #defines name -> cpu_name, or #undefs
#                                         them when included again with LLMC_OPS_CPU_UNDO defined
set -euo pipefail
hdr=${1:?usage: ops_names.sh llmc/ops.h [--syms|--header]}
names=$(sed -E -n '/^(typedef|#|\/\/|static)/d; s/^[A-Za-z_][A-Za-z0-9_ ]*[ *]+([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/p' "$hdr")
n=$(printf '%s\n' "$names" | grep -c . || true)
# every top-level prototype must have been found: count the lines that open one at column 0
decl=$(grep -cE '^[A-Za-z_][A-Za-z0-9_ ]*[ *]+[A-Za-z_][A-Za-z0-9_]*\(' "$hdr" | tr -d ' ')
decl_typedefs=$(grep -cE '^typedef[^;]*\(' "$hdr" || true)
if [ "$n" -lt 10 ] || [ "$n" -ne $((decl - decl_typedefs)) ]; then
    echo "ops_names.sh: found $n op names but $decl declarations in $hdr: keep each prototype's name on its first line" >&2
    exit 1
fi
case "${2:-}" in
    --syms) printf '%s\n' $names | sed 's/.*/& cpu_&/' ;;
    --header)
        echo "// generated from $hdr by mk/ops_names.sh: the CPU backend's ops under cpu_ names (no include guard:"
        echo "// included once to rename, again with LLMC_OPS_CPU_UNDO defined to undo the renaming)"
        echo "#ifndef LLMC_OPS_CPU_UNDO"
        printf '#define %s cpu_%s\n' $(printf '%s\n' $names | sed 's/.*/& &/')
        echo "#else"
        printf '#undef %s\n' $names
        echo "#endif" ;;
    "") printf '%s\n' $names ;;
    *) echo "ops_names.sh: unknown option $2" >&2; exit 2 ;;
esac
