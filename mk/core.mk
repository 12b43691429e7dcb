# Core trainer tests: command-line runs of train_gpt2 (resume exactness, outputs, bad input) and
# multi-rank runs under mpirun. They use the binaries in $(BINDIR).
TEST_SCRIPTS += test/test_train_cli.sh test/test_bad_input.sh test/test_train_mpi.sh
TEST_SCRIPTS += test/test_checkpoint_integrity.sh

# The README's main job: tokenize the bundled tinyshakespeare, pretrain a tiny GPT-2 on it with
# train_gpt2 (the loss falls from ~10.8), then fine-tune it with train_lora and merge the adapter.
quickstart: all
	bash scripts/lora_tiny.sh
.PHONY: quickstart
