# Outputs: the convert program's round trips and what the trainers write (PEFT / transformers
# directories that load on their own), the main job (shortened). test/test_convert.c joins
# TEST_PROGS by the wildcard.
ifeq ($(BACKEND),cpu)
TEST_SCRIPTS += test/test_convert.sh test/test_outputs.sh test/test_quickstart.sh test/test_pref_example.sh
endif
