// Resumable training state. A checkpoint of step S in the output directory DIR is:
//   DIR/model_SSSSSSSS.bin          full training: the model, llm.c .bin v3 (fp32) - loads in llm.c
//   DIR/adapter_SSSSSSSS/           LoRA: the adapter as a PEFT directory (llmc/run_outputs.h);
//                                   resuming reads its adapter_model.safetensors (PEFT keys, fp32)
//   DIR/state_SSSSSSSS_RRRRR.bin    one per rank: its optimizer shard and the run's position
//   DIR/DONE_SSSSSSSS               written last, after every rank finished: only checkpoints
//                                   with this marker are complete and ever resumed from
// Every file is written atomically, so a crash leaves the previous checkpoint intact.
//
// State file: 128 little-endian int64 (1024 bytes) header, then float32 m, v (and fp32 master
// weights when has_master) of the rank's range of the flat trainable space.
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STATE_MAGIC 20261123
#define STATE_VERSION 1

typedef enum {
    SH_MAGIC = 0, SH_VERSION, SH_WORLD, SH_RANK, SH_HAS_MASTER, SH_STEP, SH_OPT_T, SH_RNG,
    SH_DL_EPOCH, SH_DL_SHARD, SH_DL_CHUNK, SH_BEGIN, SH_END, SH_TOTAL, SH_MODE, SH_B, SH_T,
    SH_ACCUM, SH_SKIPPED, SH_ZERO, SH_SEED, SH_TOKENS_PER_STEP, SH_SHUFFLE,
    SH_NUM_FIELDS
} StateField;

typedef struct {
    int64_t h[128];
} StateHeader;

// Newest step with a DONE marker in dir, or -1 when there is none.
long ckpt_find_latest(const char* dir);
void ckpt_path(char* out, size_t cap, const char* dir, const char* kind, long step, int rank);
// Write / read one rank's state. The float arrays are host memory of (end - begin) elements.
void ckpt_write_state(const char* path, const StateHeader* hdr, const float* m, const float* v, const float* master);
// Reads the header; validates magic and version and that the file size matches.
void ckpt_read_state_header(const char* path, StateHeader* hdr);
// Copy the part of the file's range [SH_BEGIN, SH_END) that overlaps [begin, end) into m, v and
// master (arrays indexed from begin; master may be NULL). Returns the number of elements copied.
// Used to re-shard optimizer state when resuming with a different number of ranks or ZeRO stage.
size_t ckpt_read_state_overlap(const char* path, const StateHeader* hdr, size_t begin, size_t end,
                               float* m, float* v, float* master);
void ckpt_write_done(const char* dir, long step);
// Remove complete checkpoints older than the newest `keep` (0 = keep all).
void ckpt_prune(const char* dir, int keep, int world);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CHECKPOINT_H
