// Token-shard data loader (llm.c shard format: docs/FORMATS.md) with optional loss masks.
//
// A "global batch" is world * B * T tokens: rank r takes the r-th B*T slice of it (plus one
// token for the shifted targets). Each shard is cut into chunks of one global batch; batches
// walk the chunks in order, shard after shard, wrapping around at the end (a new epoch).
// With shuffling, the shard order and the chunk order within each shard are permuted per epoch
// with a seed, so every rank sees the same permutation and the run is reproducible.
//
// Loss masks: a shard X.bin may have a sidecar X.mask (header of 256 int32: magic 20261122,
// version 1, token count; then one uint8 per token). A token whose mask byte is 0 is never a
// target: its target slot becomes -1 (ignored by the loss); 1 trains it, any other byte is refused
// with the file and offset. Shards without a sidecar train on every token.
//
// Record windows: a shard whose header field 3 is T > 0 (data/prepare --record-windows T) holds
// one record per window of T tokens; it is refused unless the loader's T is that length.
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARD_MAGIC 20240520
#define MASK_MAGIC 20261122

typedef struct {
    int64_t epoch;
    int64_t shard_i;   // index into this epoch's shard order
    int64_t chunk_i;   // index into this shard's chunk order
} DataLoaderState;

typedef struct {
    int B, T, rank, world;
    int vocab_size;            // tokens >= vocab_size are refused with the file name
    int shuffle;
    uint64_t seed;
    int n_files;
    char** files;
    int64_t* ntok;             // tokens per shard
    int* has_mask;
    int64_t* shard_order;      // this epoch's shard permutation
    int64_t* chunk_order;      // the current shard's chunk permutation (max chunks)
    int64_t max_chunks;
    DataLoaderState st;
    uint16_t* tok_buf;         // B*T+1
    uint8_t* mask_buf;         // B*T+1
    int64_t total_tokens;
} DataLoader;

// pattern: a file, a glob ("data/x_train_*.bin") or several separated by commas.
void dl_init(DataLoader* dl, const char* pattern, int B, int T, int rank, int world,
             int vocab_size, int shuffle, uint64_t seed);
// Next batch of this rank: inputs and targets (B*T each, host). Targets masked out are -1.
void dl_next(DataLoader* dl, int* inputs, int* targets);
// Back to the first batch (epoch 0).
void dl_reset(DataLoader* dl);
DataLoaderState dl_get_state(const DataLoader* dl);
void dl_set_state(DataLoader* dl, DataLoaderState st);
// Number of global batches in one epoch.
int64_t dl_batches_per_epoch(const DataLoader* dl);
void dl_free(DataLoader* dl);

#ifdef __cplusplus
}
#endif
#endif // LLMC_DATALOADER_H
