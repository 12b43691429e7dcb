// generate: continue a prompt with a GPT-2 (optionally with a LoRA adapter). The same source
// builds the CPU backend (compiled as C) and the CUDA backend (nvcc); the code is in
// llmc/app/generate.c, this file only enters it.
#include "app/generate.h"

int main(int argc, char** argv) { return generate_main(argc, argv); }
