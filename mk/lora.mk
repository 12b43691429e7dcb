# LoRA (llmc/lora.c, llmc/cpu/lora_ops_cpu.c; test/test_lora.c is picked up automatically).
TEST_SCRIPTS += test/test_lora_cli.sh
