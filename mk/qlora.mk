# QLoRA (llmc/qlora.c, llmc/cpu/nf4_ops_cpu.c; test/test_qlora.c is picked up automatically).
TEST_SCRIPTS += test/test_qlora_cli.sh

# dev benchmark (not a test): peak memory and step time of --qlora vs plain LoRA at GPT-2 124M
# shapes on the CPU backend: bash dev/bench_qlora.sh
