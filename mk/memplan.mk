# The memory plan (llmc/plan/memplan.c): its multi-rank test script, run with the suite (the
# one-rank cases are test/test_memplan.c, a test program like the others); the trainers' plan step
# (llmc/plan/plan_run.c: --plan, --batch-size auto, resume) on the CPU build.
TEST_SCRIPTS += test/test_memplan.sh
TEST_SCRIPTS += test/test_plan_cli.sh
