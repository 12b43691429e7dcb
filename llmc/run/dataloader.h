// Token-shard data loader: the llm.c shard format with loss masks, record windows and preference
// pairs (docs/FORMATS.md, "Token shards").
//
// A "global batch" is world * B * T tokens: rank r takes the r-th B*T slice of it (plus one
// token for the shifted targets). Each shard is cut into chunks of one global batch; batches
// walk the chunks in order, shard after shard, wrapping around at the end (a new epoch).
// With shuffling, the shard order and the chunk order within each shard are permuted per epoch
// with a seed, so every rank sees the same permutation and the run is reproducible.
//
// Shards are checked whole when the loader opens them (llmc/text/shard.h: shard_check): tokens,
// checksums, masks. A pattern that matches part of a data/prepare output (a shard missing, or one
// of another run) is refused; files named one by one may be any part of a set. Batches are read
// from the files that were checked: each shard's files stay open while the open-file limit leaves
// room, and a shard read by path again that is no longer the file checked stops the run.
//
// A mask byte's bit 0 makes its token a target (0: the target slot is -1, ignored by the loss);
// shards without a mask train on every token. Shards of record windows (header field 3 = T) are
// refused unless the loader's T is that length; packed ones (field 4 = 1) give dl_next's
// doc_start, the position in its window where each position's record starts. Preference pairs are
// read with dl_next_pref (which also gives each pair's place in the batch and its number in the
// data set, for llmc/run/reflogps.h); dl_next refuses them (an SFT step would train on the
// rejected completions), and a pattern is all pairs or none.
//
// Evaluation (dl_init_eval): every target is read once an epoch; a shard's last chunk may be
// partial, its missing positions padded with targets -1, so each valid target counts once.
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include "text/shard.h"
#include "model/prefloss.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t epoch;
    int64_t shard_i;   // index into this epoch's shard order
    int64_t chunk_i;   // index into this shard's chunk order
} DataLoaderState;

typedef struct {
    int B, T, rank, world;
    int vocab_size;            // tokens >= vocab_size are refused with the file name
    int shuffle;
    int partial;               // evaluation: a shard's last chunk may be partial (padded, targets -1)
    uint64_t seed;
    char* pattern;             // as given, for messages
    int n_files;
    char** files;
    int* fds;                  // per shard: the descriptors of its tokens and mask, -1 where not kept open
    struct stat* ident;        // per shard: the identity of each file when it was checked
    int64_t* ntok;             // tokens per shard
    int* has_mask;             // 0: no mask; else the mask's version (1, or 2 for packed shards)
    int* shard_packed;         // the shard holds packed records (header field 4)
    int packed;                // some shard does: dl_next fills doc_start
    int64_t* shard_order;      // this epoch's shard permutation
    int64_t* chunk_order;      // the current shard's chunk permutation (max chunks)
    int64_t max_chunks;
    DataLoaderState st;
    uint16_t* tok_buf;         // B*T+1
    uint8_t* mask_buf;         // B*T+1
    int64_t total_tokens;
    int n_masked;              // shards with a loss mask
    int64_t targets, trained;  // targets of all shards (tokens 1..n-1 of each), trained ones
    int64_t n_partial;         // partial chunks (dl_init_eval)
    int pairs;                 // the shards hold preference pairs (all of them)
    int64_t n_pairs;           // pairs in all the files
    int64_t* pair_base;        // per file: the number of its first pair (pairs of the files before it)
    int64_t** win_pairs;       // per file of pairs, per window: the pairs before it in the file
    int64_t last_shard, last_start, last_got; // where the last batch was read and how many tokens (dl_next_pref's pairs)
    uint32_t data_id;          // a CRC-32C of each file's token count, header fields 8-10 (its tokens'
                               // CRC-32C, its split's id, pairs) and pair count, in order: the data
                               // a file of reference log-probabilities belongs to (llmc/run/reflogps.h)
} DataLoader;

// pattern: a file, a glob ("data/mine/x_train_*.bin") or several separated by commas.
void dl_init(DataLoader* dl, const char* pattern, int B, int T, int rank, int world,
             int vocab_size, int shuffle, uint64_t seed);
// The same for evaluation: no shuffling, every target read once an epoch (partial last chunks).
void dl_init_eval(DataLoader* dl, const char* pattern, int B, int T, int rank, int world, int vocab_size);
// Next batch of this rank: inputs and targets (B*T each, host). Targets masked out are -1.
// doc_start (B*T, or NULL when no shard is packed): the record starts, 0 everywhere in a window of
// an unpacked shard.
void dl_next(DataLoader* dl, int* inputs, int* targets, int* doc_start);
// Next batch of preference pairs (the loader's files hold pairs): dl_next's inputs, targets (the
// completions' targets; -1 elsewhere) and doc_start, and the pairs of this rank's rows: where each
// lies in the B*T positions (llmc/model/prefloss.h) and its number in the data set (ids: the
// pairs of the files before its file + its place in the file: 0 .. n_pairs - 1, stable for the
// same files). pairs and ids need room for B*T/4 + 1 entries; *n_pairs: how many.
void dl_next_pref(DataLoader* dl, int* inputs, int* targets, int* doc_start, PrefPair* pairs, int64_t* ids, int* n_pairs);
// Room dl_next_pref needs: the most pairs a batch can hold.
int dl_max_pairs(const DataLoader* dl);
// Back to the first batch (epoch 0).
void dl_reset(DataLoader* dl);
DataLoaderState dl_get_state(const DataLoader* dl);
void dl_set_state(DataLoader* dl, DataLoaderState st);
// Number of global batches in one epoch.
int64_t dl_batches_per_epoch(const DataLoader* dl);
// The data line of a run: "PATTERN (N tokens, M batches/epoch) | loss masks: on (37.5% of
// tokens trained)" ("off": no shard has a mask; "on for k of n files": some have), then with an
// evaluation loader "| val: PATTERN", and if it has partial batches how they are counted.
void dl_describe(const DataLoader* train, const DataLoader* val, char* out, size_t cap);
void dl_free(DataLoader* dl);

#ifdef __cplusplus
}
#endif
#endif // LLMC_DATALOADER_H
