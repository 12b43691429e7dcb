// train_lora: train LoRA / QLoRA adapters on a frozen GPT-2 and write PEFT-compatible adapters.
// The same source builds the CPU backend (compiled as C) and the CUDA backend (compiled by nvcc);
// everything lives in llmc/, this file only picks the mode.
#include "app/trainer.h"

int main(int argc, char** argv) { return trainer_main(argc, argv, TRAIN_LORA); }
