# ZeRO-3 / FSDP (llmc/dist/fsdp.c): its test script, run with the suite.
TEST_SCRIPTS += test/test_zero3.sh
