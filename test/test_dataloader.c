// Data loader: sequential batches (batch k reads the next B*T+1 tokens, shard after shard), the
// rank slices of a global batch, loss masks (a target whose mask byte is 0 becomes -1, as
// data/prepare writes them for prompt tokens), shuffling reproducible from the seed, and state
// save/restore landing on the same next batch. Windows: record windows (--record-windows) and
// packed records (--pack: the record starts of a version 2 mask become doc_start), the --seq-len
// they need, and the refusal of inconsistent packed shards.
#include "test.h"
#include "test_child.h"
#include "../llmc/run/dataloader.h"
#include "../llmc/base/fileio.h"
#include <stdint.h>
#include <unistd.h>

// A shard and, with mask, its mask file: window length W (header field 3), packed flag (field 4),
// mask version mv.
static void write_shard_w(const char* path, const uint16_t* tok, int n, const uint8_t* mask, int W, int packed, int mv) {
    int32_t h[256] = {0};
    h[0] = SHARD_MAGIC; h[1] = 1; h[2] = n; h[SHARD_WINDOW] = W; h[SHARD_PACKED] = packed;
    FILE* f = fopen(path, "wb");
    fwrite(h, 4, 256, f); fwrite(tok, 2, (size_t)n, f); fclose(f);
    if (mask) {
        char mp[600];
        snprintf(mp, sizeof(mp), "%.*s.mask", (int)(strlen(path) - 4), path);
        h[0] = MASK_MAGIC; h[1] = mv;
        f = fopen(mp, "wb");
        fwrite(h, 4, 256, f); fwrite(mask, 1, (size_t)n, f); fclose(f);
    }
}
static void write_shard(const char* path, const uint16_t* tok, int n, const uint8_t* mask) {
    write_shard_w(path, tok, n, mask, 0, 0, 1);
}

// ---- windows of 6 tokens. Packed: [r0 r0 r0 r1 r1 pad] [r2 x6] [r3 r4 r4 r4 r4 r4] + closing
// token; the mask's bit 1 marks each record's (and the padding's) first token, bit 0 the trained
// targets (record r1's first token is r0's trained stop, the padding's first r1's).
enum { PW = 6, PN = 3 * PW + 1 };
static const uint8_t PACK_MASK[PN] = { 2, 1, 1, 3, 1, 3,  2, 0, 1, 1, 1, 1,  2, 2, 0, 1, 1, 1,  1 };
static const int PACK_DOCS[3 * PW] = { 0, 0, 0, 3, 3, 5,  0, 0, 0, 0, 0, 0,  0, 1, 1, 1, 1, 1 };

typedef struct { const char* pat; int B, T; } DlOpen;
static void dl_open_walk(void* arg) {
    const DlOpen* o = (const DlOpen*)arg;
    DataLoader dl;
    dl_init(&dl, o->pat, o->B, o->T, 0, 1, 2000, 0, 0);
    int in[64], tg[64], ds[64];
    for (int k = 0; k < 4; k++) dl_next(&dl, in, tg, ds);
    dl_free(&dl);
}
static void expect_refused(const char* what, const char* pat, int T, const char* want) {
    DlOpen o = { pat, 1, T };
    const char* w[] = { want, NULL };
    TEST_CHECK(test_expect_fatal(what, dl_open_walk, &o, w), "%s", what);
}

static void test_packed(const char* dir) {
    uint16_t tok[PN];
    for (int i = 0; i < PN; i++) tok[i] = (uint16_t)(10 + i);
    char p[512], pat[512], mp[600];
    snprintf(p, sizeof(p), "%s/pk_train_000000.bin", dir);
    snprintf(mp, sizeof(mp), "%s/pk_train_000000.mask", dir);
    snprintf(pat, sizeof(pat), "%s/pk_train_*.bin", dir);
    write_shard_w(p, tok, PN, PACK_MASK, PW, 1, 2);
    DataLoader dl;
    dl_init(&dl, pat, 1, PW, 0, 1, 2000, 0, 0);
    TEST_CHECK(dl.packed, "a shard with header field 4 = 1 is packed");
    int in[PW], tg[PW], ds[PW];
    for (int w = 0; w < 3; w++) {
        dl_next(&dl, in, tg, ds);
        for (int t = 0; t < PW; t++) {
            const int i = w * PW + t;
            TEST_CHECK(in[t] == tok[i], "packed window %d input %d", w, t);
            TEST_CHECK(tg[t] == (PACK_MASK[i + 1] & 1 ? tok[i + 1] : -1), "packed window %d target %d = %d", w, t, tg[t]);
            TEST_CHECK(ds[t] == PACK_DOCS[i], "packed window %d doc_start[%d] = %d, want %d", w, t, ds[t], PACK_DOCS[i]);
        }
    }
    dl_free(&dl);
    // two windows per batch: doc_start is per window (row), the second row starts over at 0
    int in2[2 * PW], tg2[2 * PW], ds2[2 * PW];
    dl_init(&dl, pat, 2, PW, 0, 1, 2000, 0, 0);
    dl_next(&dl, in2, tg2, ds2);
    TEST_CHECK(memcmp(ds2, PACK_DOCS, sizeof(ds2)) == 0, "B=2: the record starts of windows 0 and 1");
    dl_free(&dl);
    printf("ok   packed shard: inputs, targets (bit 0) and record starts (bit 1) of every window\n");

    expect_refused("packed shard with another --seq-len", pat, 4,
                   "holds records packed into windows of 6 tokens (data/prepare --pack 6), but --seq-len is 4");
    uint8_t bad[PN];
    memcpy(bad, PACK_MASK, PN); bad[6] = 0;   // window 1 does not start a record
    write_shard_w(p, tok, PN, bad, PW, 1, 2);
    expect_refused("packed window without a record start", pat, PW, "the window at token 6 does not start a record");
    memcpy(bad, PACK_MASK, PN); bad[4] = 5;
    write_shard_w(p, tok, PN, bad, PW, 1, 2);
    expect_refused("mask byte beyond the two bits", pat, PW, "mask byte 5 at byte offset 1028 (token 4) is not in 0..3");
    write_shard_w(p, tok, PN, PACK_MASK, PW, 1, 1);
    expect_refused("packed shard with a version 1 mask", pat, PW, "holds packed records but its mask");
    write_shard_w(p, tok, PN, NULL, PW, 1, 2);
    unlink(mp);
    expect_refused("packed shard without a mask", pat, PW, "is missing");
    write_shard_w(p, tok, PN, PACK_MASK, PW, 0, 2);
    expect_refused("version 2 mask on an unpacked shard", pat, PW, "is a mask of packed records (version 2)");
    write_shard_w(p, tok, PN, PACK_MASK, 0, 1, 2);
    expect_refused("packed flag without a window length", pat, PW, "header field 4 is 1 with a window length of 0");

    // record windows (one record per window, version 1 mask) load as before, with or without doc_start
    uint8_t rw[PN];
    for (int i = 0; i < PN; i++) rw[i] = (uint8_t)(i % PW != 0 && i % PW < 4);
    write_shard_w(p, tok, PN, rw, PW, 0, 1);
    dl_init(&dl, pat, 1, PW, 0, 1, 2000, 0, 0);
    TEST_CHECK(!dl.packed, "record windows are not packed");
    dl_next(&dl, in, tg, NULL);
    dl_next(&dl, in, tg, ds);
    int zeros = 1;
    for (int t = 0; t < PW; t++) { zeros &= ds[t] == 0; TEST_CHECK(tg[t] == (rw[PW + t + 1] ? tok[PW + t + 1] : -1), "record window target %d", t); }
    TEST_CHECK(zeros, "record windows: doc_start 0 everywhere");
    dl_free(&dl);
    expect_refused("record windows with another --seq-len", pat, 4,
                   "holds one record per window of 6 tokens (data/prepare --record-windows 6), but --seq-len is 4");
    printf("ok   record windows load as before\n");
    unlink(p); unlink(mp);
}

int main(void) {
    char dir[] = "/tmp/llmc-dl-XXXXXX";
    TEST_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    enum { N0 = 50, N1 = 37 };
    uint16_t t0[N0], t1[N1];
    uint8_t m1[N1];
    for (int i = 0; i < N0; i++) t0[i] = (uint16_t)i;
    for (int i = 0; i < N1; i++) { t1[i] = (uint16_t)(1000 + i); m1[i] = (uint8_t)(i % 3 != 0); }
    char p0[512], p1[512], pat[512];
    snprintf(p0, sizeof(p0), "%s/d_train_000000.bin", dir);
    snprintf(p1, sizeof(p1), "%s/d_train_000001.bin", dir);
    snprintf(pat, sizeof(pat), "%s/d_train_*.bin", dir);
    write_shard(p0, t0, N0, NULL);
    write_shard(p1, t1, N1, m1);

    // ---- one rank, B=2, T=4: chunks of 8 tokens; shard 0 has (50-1)/8 = 6, shard 1 (37-1)/8 = 4
    int in[8], tg[8];
    DataLoader dl;
    dl_init(&dl, pat, 2, 4, 0, 1, 2000, 0, 0);
    TEST_CHECK(dl_batches_per_epoch(&dl) == 10, "batches per epoch %lld", (long long)dl_batches_per_epoch(&dl));
    for (int k = 0; k < 6; k++) {
        dl_next(&dl, in, tg, NULL);
        for (int i = 0; i < 8; i++) {
            TEST_CHECK(in[i] == k * 8 + i, "shard 0 batch %d input %d = %d", k, i, in[i]);
            TEST_CHECK(tg[i] == k * 8 + i + 1, "shard 0 batch %d target %d = %d", k, i, tg[i]);
        }
    }
    // shard 1 carries a mask: target j (token j+1 of the window) is kept iff mask[j+1]
    for (int k = 0; k < 4; k++) {
        dl_next(&dl, in, tg, NULL);
        for (int i = 0; i < 8; i++) {
            int pos = k * 8 + i;
            TEST_CHECK(in[i] == 1000 + pos, "shard 1 batch %d input %d", k, i);
            int want = m1[pos + 1] ? 1000 + pos + 1 : -1;
            TEST_CHECK(tg[i] == want, "shard 1 batch %d target %d = %d, want %d (mask %d)", k, i, tg[i], want, m1[pos + 1]);
        }
    }
    dl_next(&dl, in, tg, NULL); // epoch 2 starts over at shard 0
    TEST_CHECK(in[0] == 0 && tg[7] == 8, "wrap to the first batch");
    // state save / restore
    DataLoaderState st = dl_get_state(&dl);
    int a_in[8], a_tg[8];
    dl_next(&dl, a_in, a_tg, NULL);
    dl_set_state(&dl, st);
    dl_next(&dl, in, tg, NULL);
    TEST_CHECK(memcmp(in, a_in, sizeof(in)) == 0 && memcmp(tg, a_tg, sizeof(tg)) == 0, "restored state gives the same batch");
    dl_free(&dl);

    // ---- two ranks: a global batch is 2 x (B*T); rank r reads the r-th slice of every chunk
    DataLoader r0, r1;
    dl_init(&r0, p0, 1, 4, 0, 2, 2000, 0, 0);
    dl_init(&r1, p0, 1, 4, 1, 2, 2000, 0, 0);
    int i0[4], g0[4], i1[4], g1[4];
    for (int k = 0; k < 3; k++) {
        dl_next(&r0, i0, g0, NULL);
        dl_next(&r1, i1, g1, NULL);
        TEST_CHECK(i0[0] == k * 8 && i1[0] == k * 8 + 4 && g1[3] == k * 8 + 8, "rank slices of global batch %d", k);
    }
    dl_free(&r0); dl_free(&r1);

    // ---- shuffling: a permutation of the same batches, the same for the same seed
    DataLoader s1, s2, s3;
    dl_init(&s1, pat, 2, 4, 0, 1, 2000, 1, 7);
    dl_init(&s2, pat, 2, 4, 0, 1, 2000, 1, 7);
    dl_init(&s3, pat, 2, 4, 0, 1, 2000, 1, 8);
    int seen[10] = {0}, differ = 0, identical = 1;
    for (int k = 0; k < 10; k++) {
        int a[8], b[8], c[8], x[8];
        dl_next(&s1, a, x, NULL); dl_next(&s2, b, x, NULL); dl_next(&s3, c, x, NULL);
        identical &= memcmp(a, b, sizeof(a)) == 0;
        differ |= memcmp(a, c, sizeof(a)) != 0;
        int idx = a[0] >= 1000 ? 6 + (a[0] - 1000) / 8 : a[0] / 8;
        if (idx >= 0 && idx < 10) seen[idx]++;
    }
    TEST_CHECK(identical, "same seed, same order");
    TEST_CHECK(differ, "another seed, another order");
    for (int k = 0; k < 10; k++) TEST_CHECK(seen[k] == 1, "shuffled epoch visits batch %d once (%d)", k, seen[k]);
    dl_free(&s1); dl_free(&s2); dl_free(&s3);

    char mp[600];
    snprintf(mp, sizeof(mp), "%s/d_train_000001.mask", dir);
    unlink(p0); unlink(p1); unlink(mp);
    test_packed(dir);
    rmdir(dir);
    return test_finish("test_dataloader");
}
