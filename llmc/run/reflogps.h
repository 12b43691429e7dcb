// The reference log-probabilities of full fine-tuning's DPO and IPO: the reference model is the
// policy before its first step, so instead of a second copy of the model in memory its
// log-probabilities of every pair are computed once, before training (one forward pass over the
// data, as TRL's precompute_ref_log_probs), kept in host memory (16 bytes a pair), stored in the
// run's output folder and read back on resume.
//
// The file (docs/FORMATS.md, "reference log-probabilities"): a header of 128 int64 (magic
// 20261205, version 1, pairs, the data's id, the model's id, the CRC-32C of the values, the rest
// 0), then per pair (in the loader's numbering, llmc/run/dataloader.h) the chosen and the rejected
// sum as doubles. Written atomically; read back only for the same data (the loader's data_id) and
// the same reference model (the caller's id of it).
#ifndef LLMC_REFLOGPS_H
#define LLMC_REFLOGPS_H

#include <stdint.h>
#include "comm/comm.h"
#include "model/gpt2.h"
#include "model/prefmodel.h"
#include "run/dataloader.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REFLOGPS_MAGIC 20261205
#define REFLOGPS_VERSION 1

typedef struct {
    int64_t n_pairs;
    double* logp;              // [n_pairs][2]: the reference's chosen and rejected sums
    uint32_t data_id;          // the loader's data_id
    uint64_t model_id;         // the caller's fingerprint of the reference model
} RefLogps;

// Scores every pair of dl's files with m (one epoch of an evaluation loader, dl_init_eval: each
// of its targets read once; its state is reset), each rank the batches it reads, summed over the
// ranks of comm: every rank ends with every pair's values. w: buffers for dl's B x T.
void reflogps_compute(RefLogps* r, GPT2* m, PrefWork* w, DataLoader* dl, Comm* comm, uint64_t model_id);
// Writes r to path (atomically).
void reflogps_save(const RefLogps* r, const char* path);
// Reads path into r: 0 when there is no such file; 1 when read; fatal, naming the file, when it is
// not whole (size, magic, version, checksum) or is of other data or another reference model.
int reflogps_load(RefLogps* r, const char* path, uint32_t data_id, uint64_t model_id);
// seqs[i].ref_c / ref_r of the pairs numbered ids[0..n) (dl_next_pref's ids).
void reflogps_lookup(const RefLogps* r, const int64_t* ids, int n, PrefSeqs* seqs);
void reflogps_free(RefLogps* r);

#ifdef __cplusplus
}
#endif
#endif // LLMC_REFLOGPS_H
