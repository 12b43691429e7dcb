// The one training loop, shared by train_gpt2 (every parameter) and train_lora (adapters on a
// frozen base): flags -> model -> data -> optimizer -> steps (grad accumulation, clipping,
// AdamW, eval, logging, checkpoints) -> final save.
#ifndef LLMC_TRAINER_H
#define LLMC_TRAINER_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TRAIN_FULL = 0, TRAIN_LORA = 1 } TrainMode;

// Entry point of both binaries. Returns the process exit code.
int trainer_main(int argc, char** argv, TrainMode mode);

#ifdef __cplusplus
}
#endif
#endif // LLMC_TRAINER_H
