# The documents in docs/ against the code: every trainer flag in docs/ARCHITECTURE.md's table,
# the files and functions it names, the file map, no pointer to a document outside the repository
# (test/lint_docs.sh). Needs the trainers for their --help.
ifeq ($(BACKEND),cpu)
TEST_SCRIPTS += test/lint_docs.sh
endif
