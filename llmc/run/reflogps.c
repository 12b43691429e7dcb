#include "run/reflogps.h"
#include "base/check.h"
#include "base/crc32c.h"
#include "base/fileio.h"
#include <stdlib.h>
#include <string.h>

#define REFLOGPS_HEADER 128 // int64 fields

void reflogps_compute(RefLogps* r, GPT2* m, PrefWork* w, DataLoader* dl, Comm* comm, uint64_t model_id) {
    if (!dl->pairs || !dl->partial)
        fatal("this is a bug in llmc", "reference log-probabilities need an evaluation loader of preference pairs (dl_init_eval)");
    memset(r, 0, sizeof(*r));
    r->n_pairs = dl->n_pairs; r->data_id = dl->data_id; r->model_id = model_id;
    // values, then how often each pair was scored: every pair exactly once over all ranks
    double* acc = (double*)callocCheck((size_t)(3 * r->n_pairs + 1), sizeof(double));
    const int N = dl->B * dl->T, maxp = dl_max_pairs(dl);
    int* in = (int*)mallocCheck((size_t)N * sizeof(int));
    int* tg = (int*)mallocCheck((size_t)N * sizeof(int));
    int* ds = (int*)mallocCheck((size_t)N * sizeof(int));
    PrefPair* pairs = (PrefPair*)mallocCheck((size_t)maxp * sizeof(PrefPair));
    int64_t* ids = (int64_t*)mallocCheck((size_t)maxp * sizeof(int64_t));
    PrefSeqs* seqs = (PrefSeqs*)callocCheck((size_t)maxp, sizeof(PrefSeqs));
    dl_reset(dl);
    for (int64_t b = 0, nb = dl_batches_per_epoch(dl); b < nb; b++) {
        int n;
        dl_next_pref(dl, in, tg, ds, pairs, ids, &n);
        pref_score(m, w, in, tg, ds, dl->B, dl->T, pairs, n, 1, 0, seqs, NULL, NULL);
        for (int i = 0; i < n; i++) {
            acc[2 * ids[i]] = seqs[i].ref_c;
            acc[2 * ids[i] + 1] = seqs[i].ref_r;
            acc[2 * r->n_pairs + ids[i]] += 1.0;
        }
    }
    dl_reset(dl);
    if (comm) comm_allreduce_sum_f64(comm, acc, (size_t)(3 * r->n_pairs));
    for (int64_t i = 0; i < r->n_pairs; i++)
        if (acc[2 * r->n_pairs + i] != 1.0)
            fatal("this is a bug in llmc", "pair %lld was scored %g times for the reference log-probabilities", (long long)i, acc[2 * r->n_pairs + i]);
    r->logp = acc; // (the counts after the values are not read again)
    free(in); free(tg); free(ds); free(pairs); free(ids); free(seqs);
}

void reflogps_save(const RefLogps* r, const char* path) {
    int64_t h[REFLOGPS_HEADER] = {0};
    const size_t bytes = (size_t)(2 * r->n_pairs) * sizeof(double);
    h[0] = REFLOGPS_MAGIC; h[1] = REFLOGPS_VERSION; h[2] = r->n_pairs; h[3] = r->data_id;
    memcpy(&h[4], &r->model_id, sizeof(uint64_t));
    h[5] = crc32c(0, r->logp, bytes);
    AtomicFile af;
    FILE* fp = atomic_open(&af, path);
    fwriteCheck(h, sizeof(int64_t), REFLOGPS_HEADER, fp, af.tmp_path);
    fwriteCheck(r->logp, 1, bytes, fp, af.tmp_path);
    atomic_commit(&af);
}

#define REFLOGPS_HINT "delete it: the run computes the reference log-probabilities again (one forward pass over the data)"

int reflogps_load(RefLogps* r, const char* path, uint32_t data_id, uint64_t model_id) {
    memset(r, 0, sizeof(*r));
    if (!file_exists(path)) return 0;
    int64_t h[REFLOGPS_HEADER];
    FILE* fp = fopenCheck(path, "rb");
    const int64_t size = file_size(path);
    if (size < (int64_t)sizeof(h) || fread(h, sizeof(int64_t), REFLOGPS_HEADER, fp) != REFLOGPS_HEADER)
        fatal(REFLOGPS_HINT, "'%s' is too short for reference log-probabilities (%lld bytes)", path, (long long)size);
    if (h[0] != REFLOGPS_MAGIC || h[1] != REFLOGPS_VERSION)
        fatal(REFLOGPS_HINT, "'%s' is not a file of reference log-probabilities (magic %lld, version %lld)", path, (long long)h[0], (long long)h[1]);
    if (h[2] < 0 || size != (int64_t)sizeof(h) + h[2] * 2 * (int64_t)sizeof(double))
        fatal(REFLOGPS_HINT, "'%s': %lld pairs do not make its %lld bytes (truncated?)", path, (long long)h[2], (long long)size);
    uint64_t mid;
    memcpy(&mid, &h[4], sizeof(mid));
    if ((uint32_t)h[3] != data_id || h[3] != (int64_t)(uint32_t)h[3])
        fatal(REFLOGPS_HINT, "'%s' holds the reference log-probabilities of other data (data id %08x; these files' is %08x)", path,
              (unsigned)h[3], (unsigned)data_id);
    if (mid != model_id)
        fatal(REFLOGPS_HINT, "'%s' holds another reference model's log-probabilities (model id %016llx; this run's is %016llx)", path,
              (unsigned long long)mid, (unsigned long long)model_id);
    r->n_pairs = h[2]; r->data_id = data_id; r->model_id = model_id;
    r->logp = (double*)mallocCheck((size_t)(2 * r->n_pairs + 1) * sizeof(double));
    freadCheck(r->logp, sizeof(double), (size_t)(2 * r->n_pairs), fp, path);
    fclose(fp);
    if (crc32c(0, r->logp, (size_t)(2 * r->n_pairs) * sizeof(double)) != (uint32_t)h[5])
        fatal(REFLOGPS_HINT, "'%s': the values' CRC-32C is not the header's (the file changed after it was written)", path);
    return 1;
}

void reflogps_lookup(const RefLogps* r, const int64_t* ids, int n, PrefSeqs* seqs) {
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= r->n_pairs)
            fatal("this is a bug in llmc", "pair %lld of %lld reference log-probabilities", (long long)ids[i], (long long)r->n_pairs);
        seqs[i].ref_c = r->logp[2 * ids[i]];
        seqs[i].ref_r = r->logp[2 * ids[i] + 1];
    }
}

void reflogps_free(RefLogps* r) {
    free(r->logp);
    memset(r, 0, sizeof(*r));
}
