#include "run/reflogps.h"
#include "base/check.h"
#include "base/crc32c.h"
#include "base/fileio.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define REFLOGPS_HEADER 128 // int64 fields

void reflogps_compute(RefLogps* r, GPT2* m, PrefWork* w, DataLoader* dl, Comm* comm, const RefKey* key) {
    if (!dl->pairs || !dl->partial || key->n_pairs != dl->n_pairs || key->data_id != dl->data_id)
        fatal("this is a bug in llmc", "reference log-probabilities need an evaluation loader of preference pairs (dl_init_eval) of their key's data");
    memset(r, 0, sizeof(*r));
    r->key = *key;
    const int64_t np = key->n_pairs;
    // values, then how often each pair was scored: every pair exactly once over all ranks
    double* acc = (double*)callocCheck((size_t)(3 * np + 1), sizeof(double));
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
            acc[2 * np + ids[i]] += 1.0;
        }
    }
    dl_reset(dl);
    if (comm) comm_allreduce_sum_f64(comm, acc, (size_t)(3 * np));
    for (int64_t i = 0; i < np; i++)
        if (acc[2 * np + i] != 1.0)
            fatal("this is a bug in llmc", "pair %lld was scored %g times for the reference log-probabilities", (long long)i, acc[2 * np + i]);
    double* vals = (double*)realloc(acc, (size_t)(2 * np + 1) * sizeof(double)); // the values: the counts go
    r->logp = vals ? vals : acc;
    free(in); free(tg); free(ds); free(pairs); free(ids); free(seqs);
}

int64_t reflogps_first_bad(const RefLogps* r) {
    for (int64_t i = 0; i < 2 * r->key.n_pairs; i++) {
        const double v = r->logp[i];
        if (!isfinite(v) || v > REFLOGPS_MAX || v < REFLOGPS_MIN) return i / 2;
    }
    return -1;
}

// The header: fields 0-7 as docs/FORMATS.md has them, field 8 their CRC-32C.
static void reflogps_header(const RefLogps* r, int64_t* h) {
    memset(h, 0, REFLOGPS_HEADER * sizeof(int64_t));
    h[0] = REFLOGPS_MAGIC; h[1] = REFLOGPS_VERSION; h[2] = r->key.n_pairs; h[3] = r->key.data_id;
    memcpy(&h[4], &r->key.model_id, sizeof(uint64_t));
    h[5] = crc32c(0, r->logp, (size_t)(2 * r->key.n_pairs) * sizeof(double));
    h[6] = r->key.B; h[7] = r->key.T;
    h[8] = crc32c(0, h, 8 * sizeof(int64_t));
}

void reflogps_save(const RefLogps* r, const char* path) {
    int64_t h[REFLOGPS_HEADER];
    reflogps_header(r, h);
    AtomicFile af;
    FILE* fp = atomic_open(&af, path);
    fwriteCheck(h, sizeof(int64_t), REFLOGPS_HEADER, fp, af.tmp_path);
    fwriteCheck(r->logp, sizeof(double), (size_t)(2 * r->key.n_pairs), fp, af.tmp_path);
    atomic_commit(&af);
}

// The header's fields against the file's size and the key: REFLOGPS_READ when they fit, else the
// outcome and why. n_pairs is checked against the bytes after the header by division, so no
// stated count can overflow the size it implies.
static int reflogps_check_header(const int64_t* h, int64_t size, const char* path, const RefKey* key, char* why, size_t cap) {
    const int64_t body = size - (int64_t)(REFLOGPS_HEADER * sizeof(int64_t)), pair_bytes = 2 * (int64_t)sizeof(double);
    uint64_t mid;
    memcpy(&mid, &h[4], sizeof(mid));
    if (h[0] != REFLOGPS_MAGIC || h[1] != REFLOGPS_VERSION) {
        snprintf(why, cap, h[0] == REFLOGPS_MAGIC && h[1] == 1
                 ? "'%s' is of an earlier version (1), whose model id is no fingerprint of the weights"
                 : "'%s' is not a file of reference log-probabilities (magic %lld, version %lld)", path, (long long)h[0], (long long)h[1]);
        return h[0] == REFLOGPS_MAGIC && h[1] == 1 ? REFLOGPS_OTHER : REFLOGPS_DAMAGED;
    }
    if ((uint32_t)h[8] != crc32c(0, h, 8 * sizeof(int64_t)) || h[8] != (int64_t)(uint32_t)h[8])
        return snprintf(why, cap, "'%s': its header's CRC-32C is not the header's fields' (the file changed after it was written)", path), REFLOGPS_DAMAGED;
    if (h[2] < 0 || h[2] > body / pair_bytes || body != h[2] * pair_bytes)
        return snprintf(why, cap, "'%s': %lld pairs do not make its %lld bytes (truncated?)", path, (long long)h[2], (long long)size), REFLOGPS_DAMAGED;
    if ((uint32_t)h[3] != key->data_id || h[3] != (int64_t)(uint32_t)h[3] || h[2] != key->n_pairs)
        return snprintf(why, cap, "'%s' holds the reference log-probabilities of other data (data id %08x, %lld pairs; these files': %08x, %lld pairs)",
                        path, (unsigned)h[3], (long long)h[2], (unsigned)key->data_id, (long long)key->n_pairs), REFLOGPS_OTHER;
    if (mid != key->model_id)
        return snprintf(why, cap, "'%s' holds the log-probabilities of other weights (model id %016llx; this run's reference: %016llx)", path,
                        (unsigned long long)mid, (unsigned long long)key->model_id), REFLOGPS_OTHER;
    if (h[6] != key->B || h[7] != key->T)
        return snprintf(why, cap, "'%s' was computed in batches of %lld x %lld tokens (this run's: %d x %d)", path, (long long)h[6],
                        (long long)h[7], key->B, key->T), REFLOGPS_OTHER;
    return REFLOGPS_READ;
}

int reflogps_load(RefLogps* r, const char* path, const RefKey* key, char* why, size_t cap) {
    memset(r, 0, sizeof(*r));
    if (!file_exists(path)) return REFLOGPS_NONE;
    int64_t h[REFLOGPS_HEADER];
    FILE* fp = fopenCheck(path, "rb");
    struct stat st;
    const int64_t size = fstat(fileno(fp), &st) == 0 ? (int64_t)st.st_size : -1;
    int rc = REFLOGPS_READ;
    if (size < (int64_t)sizeof(h) || fread(h, sizeof(int64_t), REFLOGPS_HEADER, fp) != REFLOGPS_HEADER) {
        snprintf(why, cap, "'%s' is too short for reference log-probabilities (%lld bytes)", path, (long long)size);
        rc = REFLOGPS_DAMAGED;
    }
    if (rc == REFLOGPS_READ) rc = reflogps_check_header(h, size, path, key, why, cap);
    if (rc != REFLOGPS_READ) { fclose(fp); return rc; }
    r->key = *key;
    r->logp = (double*)mallocCheck((size_t)(2 * key->n_pairs + 1) * sizeof(double));
    freadCheck(r->logp, sizeof(double), (size_t)(2 * key->n_pairs), fp, path);
    fclose(fp);
    int64_t bad = -1;
    if (crc32c(0, r->logp, (size_t)(2 * key->n_pairs) * sizeof(double)) != (uint32_t)h[5]) {
        snprintf(why, cap, "'%s': the values' CRC-32C is not the header's (the file changed after it was written)", path);
        rc = REFLOGPS_DAMAGED;
    } else if ((bad = reflogps_first_bad(r)) >= 0) {
        snprintf(why, cap, "'%s': pair %lld's reference log-probabilities are %g and %g: not sums of log-probabilities (finite, at most 0)", path,
                 (long long)bad, r->logp[2 * bad], r->logp[2 * bad + 1]);
        rc = REFLOGPS_DAMAGED;
    }
    if (rc != REFLOGPS_READ) reflogps_free(r);
    return rc;
}

void reflogps_lookup(const RefLogps* r, const int64_t* ids, int n, PrefSeqs* seqs) {
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= r->key.n_pairs)
            fatal("this is a bug in llmc", "pair %lld of %lld reference log-probabilities", (long long)ids[i], (long long)r->key.n_pairs);
        seqs[i].ref_c = r->logp[2 * ids[i]];
        seqs[i].ref_r = r->logp[2 * ids[i] + 1];
    }
}

void reflogps_free(RefLogps* r) {
    free(r->logp);
    memset(r, 0, sizeof(*r));
}
