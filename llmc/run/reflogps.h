// The reference log-probabilities of full fine-tuning's DPO and IPO: the reference model is the
// policy before its first step, so instead of a second copy of the model in memory its
// log-probabilities of every pair are computed once, before training (one forward pass over the
// data, as TRL's precompute_ref_log_probs), kept in host memory (16 bytes a pair), stored in the
// run's output folder and read back on resume.
//
// The file (docs/FORMATS.md, "reference log-probabilities"): a header of 128 int64 (magic
// 20261205, version 2, pairs, the data's id, the model's id, the CRC-32C of the values, B, T, the
// CRC-32C of the header's fields 0-7, the rest 0), then per pair (in the loader's numbering,
// llmc/run/dataloader.h) the chosen and the rejected sum as doubles. Written atomically; read back
// only for the same key (RefKey: what the values depend on), and only when every size it states
// fits the file and every value is a log-probability sum.
#ifndef LLMC_REFLOGPS_H
#define LLMC_REFLOGPS_H

#include <stddef.h>
#include <stdint.h>
#include "comm/comm.h"
#include "model/gpt2.h"
#include "model/prefmodel.h"
#include "run/dataloader.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REFLOGPS_MAGIC 20261205
#define REFLOGPS_VERSION 2
// A stored value is a sum of log-probabilities: finite, at most 0 (REFLOGPS_MAX allows the
// rounding of a sum of zeros), and above REFLOGPS_MIN (below it the pair terms' differences lose
// every digit, or overflow).
#define REFLOGPS_MAX 1e-3
#define REFLOGPS_MIN -1e15

// What the values depend on: a file is read back only for the same key.
typedef struct {
    uint64_t model_id;         // the reference model's weights (llmc/run/preftrain.c: a CRC-32C of
                               // its files, or of a size descriptor and the seed)
    uint32_t data_id;          // the loader's data_id ...
    int64_t n_pairs;           // ... and n_pairs
    int B, T;                  // the batches they were computed in (T: the windows; B x T rows:
                               // the GEMMs' shape, which may change their rounding)
} RefKey;

typedef struct {
    RefKey key;
    double* logp;              // [n_pairs][2]: the reference's chosen and rejected sums
} RefLogps;

// reflogps_load's outcomes
#define REFLOGPS_NONE 0        // no file
#define REFLOGPS_READ 1        // read: r holds it
#define REFLOGPS_DAMAGED (-1)  // not whole (size, magic, version, checksums) or values that are no log-probabilities
#define REFLOGPS_OTHER (-2)    // whole, but of another key (other weights, data or batches)

// Scores every pair of dl's files with m (one epoch of an evaluation loader, dl_init_eval: each
// of its targets read once; its state is reset), each rank the batches it reads, summed over the
// ranks of comm: every rank ends with every pair's values. w: buffers for dl's B x T.
void reflogps_compute(RefLogps* r, GPT2* m, PrefWork* w, DataLoader* dl, Comm* comm, const RefKey* key);
// The first pair whose values are not log-probability sums (non-finite, above REFLOGPS_MAX or
// below REFLOGPS_MIN), or -1.
int64_t reflogps_first_bad(const RefLogps* r);
// Writes r to path (atomically).
void reflogps_save(const RefLogps* r, const char* path);
// Reads path into r when it is whole and of key: one of the outcomes above; unless READ, r is
// empty and (DAMAGED, OTHER) why says what is wrong, naming the file. Every size is checked
// against the file's without overflow before anything is allocated.
int reflogps_load(RefLogps* r, const char* path, const RefKey* key, char* why, size_t cap);
// seqs[i].ref_c / ref_r of the pairs numbered ids[0..n) (dl_next_pref's ids).
void reflogps_lookup(const RefLogps* r, const int64_t* ids, int n, PrefSeqs* seqs);
void reflogps_free(RefLogps* r);

#ifdef __cplusplus
}
#endif
#endif // LLMC_REFLOGPS_H
