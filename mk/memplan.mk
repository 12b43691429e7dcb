# The memory plan (llmc/run/memplan.c): its multi-rank test script, run with the suite (the
# one-rank cases are test/test_memplan.c, a test program like the others).
TEST_SCRIPTS += test/test_memplan.sh
