// The `generate` program: text completion from a GPT-2 (any model file the trainers write,
// including 4-bit NF4 checkpoints), optionally with a LoRA adapter.
#ifndef LLMC_GENERATE_H
#define LLMC_GENERATE_H

#ifdef __cplusplus
extern "C" {
#endif

int generate_main(int argc, char** argv);

#ifdef __cplusplus
}
#endif
#endif // LLMC_GENERATE_H
