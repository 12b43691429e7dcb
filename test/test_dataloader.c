// Data loader: sequential batches (batch k reads the next B*T+1 tokens, shard after shard), the
// rank slices of a global batch, loss masks (a target whose mask byte is 0 becomes -1, as
// data/prepare writes them for prompt tokens), shuffling reproducible from the seed, and state
// save/restore landing on the same next batch.
#include "test.h"
#include "../llmc/run/dataloader.h"
#include "../llmc/base/fileio.h"
#include <stdint.h>
#include <unistd.h>

static void write_shard(const char* path, const uint16_t* tok, int n, const uint8_t* mask) {
    int32_t h[256] = {0};
    h[0] = SHARD_MAGIC; h[1] = 1; h[2] = n;
    FILE* f = fopen(path, "wb");
    fwrite(h, 4, 256, f); fwrite(tok, 2, (size_t)n, f); fclose(f);
    if (mask) {
        char mp[600];
        snprintf(mp, sizeof(mp), "%.*s.mask", (int)(strlen(path) - 4), path);
        h[0] = MASK_MAGIC;
        f = fopen(mp, "wb");
        fwrite(h, 4, 256, f); fwrite(mask, 1, (size_t)n, f); fclose(f);
    }
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
        dl_next(&dl, in, tg);
        for (int i = 0; i < 8; i++) {
            TEST_CHECK(in[i] == k * 8 + i, "shard 0 batch %d input %d = %d", k, i, in[i]);
            TEST_CHECK(tg[i] == k * 8 + i + 1, "shard 0 batch %d target %d = %d", k, i, tg[i]);
        }
    }
    // shard 1 carries a mask: target j (token j+1 of the window) is kept iff mask[j+1]
    for (int k = 0; k < 4; k++) {
        dl_next(&dl, in, tg);
        for (int i = 0; i < 8; i++) {
            int pos = k * 8 + i;
            TEST_CHECK(in[i] == 1000 + pos, "shard 1 batch %d input %d", k, i);
            int want = m1[pos + 1] ? 1000 + pos + 1 : -1;
            TEST_CHECK(tg[i] == want, "shard 1 batch %d target %d = %d, want %d (mask %d)", k, i, tg[i], want, m1[pos + 1]);
        }
    }
    dl_next(&dl, in, tg); // epoch 2 starts over at shard 0
    TEST_CHECK(in[0] == 0 && tg[7] == 8, "wrap to the first batch");
    // state save / restore
    DataLoaderState st = dl_get_state(&dl);
    int a_in[8], a_tg[8];
    dl_next(&dl, a_in, a_tg);
    dl_set_state(&dl, st);
    dl_next(&dl, in, tg);
    TEST_CHECK(memcmp(in, a_in, sizeof(in)) == 0 && memcmp(tg, a_tg, sizeof(tg)) == 0, "restored state gives the same batch");
    dl_free(&dl);

    // ---- two ranks: a global batch is 2 x (B*T); rank r reads the r-th slice of every chunk
    DataLoader r0, r1;
    dl_init(&r0, p0, 1, 4, 0, 2, 2000, 0, 0);
    dl_init(&r1, p0, 1, 4, 1, 2, 2000, 0, 0);
    int i0[4], g0[4], i1[4], g1[4];
    for (int k = 0; k < 3; k++) {
        dl_next(&r0, i0, g0);
        dl_next(&r1, i1, g1);
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
        dl_next(&s1, a, x); dl_next(&s2, b, x); dl_next(&s3, c, x);
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
    unlink(p0); unlink(p1); unlink(mp); rmdir(dir);
    return test_finish("test_dataloader");
}
