# Core trainer tests: command-line runs of train_gpt2 (resume exactness, outputs, bad input) and
# multi-rank runs under mpirun. They use the binaries in $(BINDIR).
TEST_SCRIPTS += test/test_train_cli.sh test/test_bad_input.sh test/test_train_mpi.sh
