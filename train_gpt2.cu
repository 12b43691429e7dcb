// train_gpt2: train every parameter of a GPT-2 model (fine-tuning a checkpoint, or pretraining
// from scratch with --model d12). The same source builds the CPU backend (compiled as C) and the
// CUDA backend (compiled by nvcc); everything lives in llmc/, this file only picks the mode.
#include "app/trainer.h"

int main(int argc, char** argv) { return trainer_main(argc, argv, TRAIN_FULL); }
