// convert: turn a GPT-2 model file into another format (llm.c .bin fp32 / bf16, a transformers
// directory, one .safetensors file, GGUF for llama.cpp), optionally merging a LoRA adapter, or a
// LoRA adapter into a GGUF adapter. The same source builds the CPU backend (compiled
// as C) and the CUDA backend (nvcc); the code is in llmc/model/convert.c and llmc/app/convert_cli.c.
#include "model/convert.h"

int main(int argc, char** argv) { return convert_main(argc, argv); }
