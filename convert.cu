// convert: turn a GPT-2 model file into another format (llm.c .bin fp32 / bf16, a transformers
// directory, one .safetensors file, GGUF for llama.cpp), optionally merging a LoRA adapter, or a
// LoRA adapter into a GGUF adapter. The same source builds the CPU backend (compiled
// as C) and the CUDA backend (nvcc); the code is in llmc/app/convert_cli.c and llmc/model/convert.c; this file only enters it.
#include "app/convert_cli.h"

int main(int argc, char** argv) { return convert_main(argc, argv); }
