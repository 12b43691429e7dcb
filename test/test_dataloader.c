// Data loader: sequential batches (batch k reads the next B*T+1 tokens, shard after shard), the
// rank slices of a global batch, loss masks (a target whose mask byte is 0 becomes -1, as
// data/prepare writes them for prompt tokens), shuffling reproducible from the seed, and state
// save/restore landing on the same next batch. Windows: record windows (--record-windows) and
// packed records (--pack: the record starts of a version 2 mask become doc_start), the --seq-len
// they need, and the refusal of inconsistent packed shards. Shards as data/prepare writes them now
// (header fields 5-10, written here from docs/FORMATS.md): a missing mask, a mask of another shard,
// changed bytes, part of a set matched by a glob, all refused when the loader opens them, as is a
// token out of range (it was found when its batch came); evaluation's partial batches; the data
// line's mask summary. Preference pairs (header field 10, mask version 3): dl_next_pref's pairs
// (positions of each completion's targets, of the chosen record, numbers through the files), a
// record without a prompt, dl_next refusing pairs, a pattern mixing pairs and other shards, and a
// pair shard whose records are out of order refused when it is opened. Shards replaced during the
// run: read from the files checked, or (read by path) refused naming the file.
#include "test.h"
#include "test_child.h"
#include "../llmc/run/dataloader.h"
#include "../llmc/base/fileio.h"
#include "../llmc/base/crc32c.h"
#include <stdint.h>
#include <sys/resource.h>
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

// the loader only opened: what it refuses before the first batch
static void dl_open_only(void* arg) {
    const DlOpen* o = (const DlOpen*)arg;
    DataLoader dl;
    dl_init(&dl, o->pat, o->B, o->T, 0, 1, 2000, 0, 0);
    dl_free(&dl);
}
static void expect_refused_at_open(const char* what, const char* pat, int T, const char* want) {
    DlOpen o = { pat, 1, T };
    const char* w[] = { want, NULL };
    TEST_CHECK(test_expect_fatal(what, dl_open_only, &o, w), "%s", what);
}

// Shard k of n of a set, as docs/FORMATS.md lays it out: field 5 (has a mask), 6-7 (k of n), 8
// (CRC-32C of the tokens), 9 (the set); the mask repeats fields 3-9 and has its bytes' CRC-32C in 10.
static void write_stated(const char* path, const uint16_t* tok, int n, const uint8_t* mask, int k, int nk, int32_t set) {
    int32_t h[256] = {0};
    h[0] = SHARD_MAGIC; h[1] = 1; h[2] = n;
    h[5] = mask != NULL; h[6] = k; h[7] = nk; h[8] = (int32_t)crc32c(0, tok, (size_t)n * 2); h[9] = set;
    FILE* f = fopen(path, "wb");
    fwrite(h, 4, 256, f); fwrite(tok, 2, (size_t)n, f); fclose(f);
    if (!mask) return;
    char mp[600];
    snprintf(mp, sizeof(mp), "%.*s.mask", (int)(strlen(path) - 4), path);
    h[0] = MASK_MAGIC; h[10] = (int32_t)crc32c(0, mask, (size_t)n);
    f = fopen(mp, "wb");
    fwrite(h, 4, 256, f); fwrite(mask, 1, (size_t)n, f); fclose(f);
}

static void test_stated(const char* dir) {
    enum { N = 33 };
    uint16_t tok[N];
    uint8_t m[N];
    for (int i = 0; i < N; i++) { tok[i] = (uint16_t)(100 + i); m[i] = (uint8_t)(i % 4 == 3); }
    char p[3][512], mp[600], pat[512], list[1600];
    for (int k = 0; k < 3; k++) snprintf(p[k], sizeof(p[k]), "%s/s_train_%06d.bin", dir, k);
    snprintf(pat, sizeof(pat), "%s/s_train_*.bin", dir);
    snprintf(mp, sizeof(mp), "%s/s_train_000001.mask", dir);
    for (int k = 0; k < 3; k++) write_stated(p[k], tok, N, m, k, 3, 77);
    DataLoader dl;
    dl_init(&dl, pat, 2, 4, 0, 1, 2000, 0, 0);
    TEST_CHECK(dl.n_masked == 3 && dl.targets == 3 * (N - 1) && dl.trained == 3 * 8, "3 masked shards, %lld of %lld targets trained",
               (long long)dl.trained, (long long)dl.targets);
    char line[2048];
    dl_describe(&dl, NULL, line, sizeof(line));
    char want[1200];
    snprintf(want, sizeof(want), "%s (99 tokens, 12 batches/epoch) | loss masks: on (25.0%% of tokens trained)", pat);
    TEST_CHECK(strcmp(line, want) == 0, "data line '%s'", line);
    dl_free(&dl);
    printf("ok   shards with header fields 5-10 load; the data line: %s\n", line);

    unlink(mp);
    expect_refused_at_open("missing mask refused", pat, 4, "s_train_000001.bin' was written with a loss mask, but its mask");
    write_stated(p[1], tok, N, NULL, 1, 3, 77);
    write_stated(p[0], tok, N, m, 0, 3, 77);
    {   // shard 0's mask beside shard 1, which was written without one: a leftover
        char m0[600];
        snprintf(m0, sizeof(m0), "%s/s_train_000000.mask", dir);
        FILE* a = fopen(m0, "rb"); FILE* b = fopen(mp, "wb");
        char buf[2048]; size_t r;
        while ((r = fread(buf, 1, sizeof(buf), a)) > 0) fwrite(buf, 1, r, b);
        fclose(a); fclose(b);
    }
    expect_refused_at_open("a mask beside a shard written without one refused", pat, 4, "which was written without a loss mask");
    write_stated(p[1], tok, N, m, 1, 3, 77);
    {   // shard 1's mask rewritten for another set: it names another shard
        int32_t h[256];
        FILE* f = fopen(mp, "r+b");
        TEST_CHECK(fread(h, 4, 256, f) == 256, "read mask header");
        h[9] = 78;
        fseek(f, 0, SEEK_SET); fwrite(h, 4, 256, f); fclose(f);
    }
    expect_refused_at_open("a mask of another shard refused", pat, 4, "s_train_000001.mask' does not belong to");
    write_stated(p[1], tok, N, m, 1, 3, 77);
    {   // one token changed after data/prepare wrote it; then one mask byte
        FILE* f = fopen(p[1], "r+b");
        fseek(f, 1024 + 2 * 5, SEEK_SET); uint16_t x = 7; fwrite(&x, 2, 1, f); fclose(f);
    }
    expect_refused_at_open("changed token bytes refused (CRC-32C)", pat, 4, "the tokens' CRC-32C is");
    write_stated(p[1], tok, N, m, 1, 3, 77);
    {
        FILE* f = fopen(mp, "r+b");
        fseek(f, 1024 + 6, SEEK_SET); uint8_t x = 1; fwrite(&x, 1, 1, f); fclose(f);
    }
    expect_refused_at_open("changed mask bytes refused (CRC-32C)", pat, 4, "the mask bytes' CRC-32C is");
    write_stated(p[1], tok, N, m, 1, 3, 77);
    printf("ok   missing, leftover, foreign and changed masks and changed tokens refused when the loader opens the shard\n");

    // part of the set through a glob: refused, naming the missing shard; named one by one: loads
    unlink(p[1]); unlink(mp);
    expect_refused_at_open("partial shard set refused", pat, 4, "is shard 1 of 3 of a data/prepare output (set 0000004d), but shard 2 (");
    snprintf(list, sizeof(list), "%s,%s", p[0], p[2]);
    dl_init(&dl, list, 2, 4, 0, 1, 2000, 0, 0);
    TEST_CHECK(dl.n_files == 2, "part of a set named file by file");
    dl_free(&dl);
    write_stated(p[1], tok, N, m, 1, 4, 99); // shard 2 of another set in its place
    expect_refused_at_open("a shard of another set in the place of a missing one refused", pat, 4, "belongs to another one");
    printf("ok   a glob over part of a data/prepare output refused; its files named one by one load\n");
    for (int k = 0; k < 3; k++) {
        unlink(p[k]);
        snprintf(mp, sizeof(mp), "%.*s.mask", (int)(strlen(p[k]) - 4), p[k]);
        unlink(mp);
    }
}

// token out of range: refused by dl_init, naming file, token and byte offset (a legacy shard, no checksum)
static void test_range_at_open(const char* dir) {
    enum { N = 60 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)i;
    tok[45] = 2500;
    char p[512];
    snprintf(p, sizeof(p), "%s/r.bin", dir);
    write_shard(p, tok, N, NULL);
    expect_refused_at_open("token out of range refused at open", p, 4, "r.bin': token id 2500 at token 45 (byte offset 1114) is out of range for the model's vocabulary (2000)");
    unlink(p);
    printf("ok   token out of range refused at open (token 45 of the 6th batch)\n");
}

// evaluation: every target once; the last chunk partial, padded with -1 targets
static void test_partial_eval(const char* dir) {
    enum { N = 21 };
    uint16_t tok[N];
    uint8_t m[N];
    for (int i = 0; i < N; i++) { tok[i] = (uint16_t)(500 + i); m[i] = (uint8_t)(i != 18); }
    char p[512];
    snprintf(p, sizeof(p), "%s/v.bin", dir);
    write_shard(p, tok, N, m);
    DataLoader dl;
    dl_init_eval(&dl, p, 2, 4, 0, 1, 2000);
    TEST_CHECK(dl_batches_per_epoch(&dl) == 3 && dl.n_partial == 1, "20 targets in chunks of 8: 3 batches, the last partial (%lld)",
               (long long)dl_batches_per_epoch(&dl));
    int in[8], tg[8], seen = 0;
    for (int b = 0; b < 3; b++) {
        dl_next(&dl, in, tg, NULL);
        for (int i = 0; i < 8; i++) {
            const int pos = b * 8 + i, real = pos + 1 < N;
            const int want = real && m[pos + 1] ? 500 + pos + 1 : -1;
            TEST_CHECK(tg[i] == want && in[i] == (pos < N ? 500 + pos : 0), "eval batch %d position %d: input %d target %d, want %d", b, i, in[i], tg[i], want);
            seen += real;
        }
    }
    TEST_CHECK(seen == N - 1, "every target read once (%d)", seen);
    char line[2048], want[1600];
    DataLoader tr;
    dl_init(&tr, p, 2, 4, 0, 1, 2000, 0, 0);
    dl_describe(&tr, &dl, line, sizeof(line));
    snprintf(want, sizeof(want), "%s (21 tokens, 2 batches/epoch) | loss masks: on (95.0%% of tokens trained) | val: %s (3 batches, one partial: each target counts once)", p, p);
    TEST_CHECK(strcmp(line, want) == 0, "data line '%s'", line);
    dl_free(&tr);
    dl_free(&dl);
    // two ranks, chunks of 16: the partial chunk gives rank 0 the last 4 targets, rank 1 none
    DataLoader r0, r1;
    dl_init_eval(&r0, p, 2, 4, 0, 2, 2000);
    dl_init_eval(&r1, p, 2, 4, 1, 2, 2000);
    TEST_CHECK(dl_batches_per_epoch(&r0) == 2, "two ranks: 2 batches");
    int i0[8], g0[8], i1[8], g1[8], n0 = 0, n1 = 0;
    dl_next(&r0, i0, g0, NULL); dl_next(&r1, i1, g1, NULL);
    dl_next(&r0, i0, g0, NULL); dl_next(&r1, i1, g1, NULL);
    for (int i = 0; i < 8; i++) { n0 += g0[i] >= 0; n1 += g1[i] >= 0; }
    TEST_CHECK(n0 == 3 && n1 == 0 && g0[0] == 517 && g0[1] == -1 && g0[2] == 519, "two ranks, partial chunk: rank 0 %d targets, rank 1 %d", n0, n1);
    dl_free(&r0); dl_free(&r1);
    // a training loader still needs whole batches (and says how many tokens one needs)
    DlOpen o = { p, 4, 8 };
    const char* w[] = { "fewer than one global batch needs (1 ranks x 4 x 8 + 1 = 33)", NULL };
    TEST_CHECK(test_expect_fatal("training shard smaller than a batch", dl_open_only, &o, w), "training loader refuses a partial batch");
    char mp[600];
    snprintf(mp, sizeof(mp), "%s/v.mask", dir);
    unlink(p); unlink(mp);
    printf("ok   evaluation reads partial batches: every target once, padding -1, one rank or two\n");
}

// ---- preference pairs, windows of 8: [c: E p c1] [r: E p r1 r2] [pad: E]  |  [c: E y] [r: E z]
// [c: E u] [r: E w]  + closing token. Mask: start 2, chosen 4, rejected 8, bit 0 the trained
// targets (each record's first token carries the stop of the record before it).
enum { RW = 8, RN = 2 * RW + 1 };
static const uint16_t PAIR_TOK[RN] = { 99, 1, 2, 99, 1, 3, 4, 99,  99, 5, 99, 6, 99, 7, 99, 8,  99 };
static const uint8_t PAIR_MASK[RN] = { 6, 0, 1, 11, 0, 1, 1, 3,  6, 1, 11, 1, 7, 1, 11, 1,  1 };

static void write_pairs(const char* path, const uint8_t* mask) {
    int32_t h[256] = {0};
    h[0] = SHARD_MAGIC; h[1] = 1; h[2] = RN; h[SHARD_WINDOW] = RW; h[SHARD_PACKED] = 1; h[SHARD_HAS_MASK] = 1; h[SHARD_PAIRS] = 1;
    FILE* f = fopen(path, "wb");
    fwrite(h, 4, 256, f); fwrite(PAIR_TOK, 2, RN, f); fclose(f);
    char mp[600];
    snprintf(mp, sizeof(mp), "%.*s.mask", (int)(strlen(path) - 4), path);
    h[0] = MASK_MAGIC; h[1] = MASK_VERSION_PAIRS; h[SHARD_PAIRS] = 0; // (a mask's field 10 is its CRC: unstated here)
    f = fopen(mp, "wb");
    fwrite(h, 4, 256, f); fwrite(mask, 1, RN, f); fclose(f);
}

static void dl_plain_next(void* arg) {
    DataLoader dl;
    dl_init(&dl, (const char*)arg, 1, RW, 0, 1, 2000, 0, 0);
    int in[RW], tg[RW], ds[RW];
    dl_next(&dl, in, tg, ds);
    dl_free(&dl);
}

static int same_pair(const PrefPair* p, int cf, int cb, int ce, int rb, int re) {
    return p->c_first == cf && p->c_begin == cb && p->c_end == ce && p->r_begin == rb && p->r_end == re;
}

// An evaluation batch of pairs that is partial (the split's windows not a multiple of B): its last
// token read is the shard's closing token, which data/prepare writes as the next window's first
// (the training split's, in a validation shard): a chosen record's start whose record is not in
// the file. The batch's pairs are those of its whole windows; the closing token starts none.
static void test_pairs_partial(const char* dir) {
    char p[512];
    snprintf(p, sizeof(p), "%s/prv_val_000000.bin", dir);
    uint8_t m[RN];
    memcpy(m, PAIR_MASK, RN);
    m[RN - 1] = 7; // the closing token: start, chosen, and the last record's trained stop
    write_pairs(p, m);
    DataLoader dl;
    dl_init_eval(&dl, p, 3, RW, 0, 1, 2000); // 2 windows, batches of 3: one batch, partial
    int in[3 * RW], tg[3 * RW], ds[3 * RW], n = -1, pairs = 0;
    PrefPair pp[8];
    int64_t ids[8];
    const int64_t nb = dl_batches_per_epoch(&dl);
    for (int64_t b = 0; b < nb; b++) {
        dl_next_pref(&dl, in, tg, ds, pp, ids, &n);
        pairs += n;
    }
    TEST_CHECK(nb == 1 && pairs == 3 && tg[2 * RW] == -1 && ids[2] == 2,
               "partial pair batch whose closing token starts a chosen record: %lld batches, %d pairs", (long long)nb, pairs);
    dl_free(&dl);
    // three ranks of one window: rank 0 window 0, rank 1 window 1, rank 2 the closing token alone
    int got[3];
    for (int r = 0; r < 3; r++) {
        dl_init_eval(&dl, p, 1, RW, r, 3, 2000);
        dl_next_pref(&dl, in, tg, ds, pp, ids, &got[r]);
        dl_free(&dl);
    }
    TEST_CHECK(got[0] == 1 && got[1] == 2 && got[2] == 0, "three ranks: %d, %d and %d pairs", got[0], got[1], got[2]);
    char mp[600];
    snprintf(mp, sizeof(mp), "%s/prv_val_000000.mask", dir);
    unlink(p); unlink(mp);
    printf("ok   a partial evaluation batch of pairs (windows not a multiple of B): the closing token's chosen mark starts no pair\n");
}

static void test_pairs(const char* dir) {
    char p0[512], p1[512], pat[512], bad[1100];
    snprintf(p0, sizeof(p0), "%s/pr_train_000000.bin", dir);
    snprintf(p1, sizeof(p1), "%s/pr_train_000001.bin", dir);
    snprintf(pat, sizeof(pat), "%s/pr_train_*.bin", dir);
    write_pairs(p0, PAIR_MASK);
    write_pairs(p1, PAIR_MASK);
    DataLoader dl;
    dl_init(&dl, pat, 1, RW, 0, 1, 2000, 0, 0);
    TEST_CHECK(dl.pairs && dl.n_pairs == 6 && dl_max_pairs(&dl) >= 2, "pairs %d, %lld of them", dl.pairs, (long long)dl.n_pairs);
    int in[2 * RW], tg[2 * RW], ds[2 * RW], n;
    PrefPair pp[8];
    int64_t ids[8];
    for (int file = 0; file < 2; file++) {
        dl_next_pref(&dl, in, tg, ds, pp, ids, &n); // window 0: one pair, with a prompt
        TEST_CHECK(n == 1 && same_pair(&pp[0], 0, 1, 3, 4, 7) && ids[0] == 3 * file, "file %d window 0: %d pairs, id %lld", file, n, (long long)ids[0]);
        TEST_CHECK(tg[0] == -1 && tg[1] == 2 && tg[2] == 99 && tg[3] == -1 && tg[4] == 3 && tg[6] == 99 && tg[7] == -1, "window 0 targets");
        dl_next_pref(&dl, in, tg, ds, pp, ids, &n); // window 1: two pairs without prompts
        TEST_CHECK(n == 2 && same_pair(&pp[0], 0, 0, 2, 2, 4) && same_pair(&pp[1], 4, 4, 6, 6, 8) && ids[0] == 3 * file + 1 &&
                   ids[1] == 3 * file + 2, "file %d window 1: %d pairs, ids %lld %lld", file, n, (long long)ids[0], (long long)ids[1]);
        TEST_CHECK(ds[2] == 2 && ds[5] == 4 && ds[7] == 6, "window 1: record starts");
    }
    dl_free(&dl);
    dl_init(&dl, pat, 2, RW, 0, 1, 2000, 0, 0); // both windows of a file in one batch: positions of window 1 + 8
    dl_next_pref(&dl, in, tg, ds, pp, ids, &n);
    TEST_CHECK(n == 3 && same_pair(&pp[0], 0, 1, 3, 4, 7) && same_pair(&pp[2], 12, 12, 14, 14, 16) && ids[2] == 2, "B = 2: %d pairs", n);
    char line[512];
    dl_describe(&dl, NULL, line, sizeof(line));
    TEST_CHECK(strstr(line, "| 6 preference pairs") != NULL, "data line: %s", line);
    dl_free(&dl);
    printf("ok   pairs: positions of each completion's targets, the chosen record, numbers through the files\n");
    const char* w1[] = { "holds preference pairs: a supervised step would train the rejected completions too", NULL };
    TEST_CHECK(test_expect_fatal("dl_next refuses pairs", dl_plain_next, pat, w1), "dl_next on pairs");
    char plain[512];
    snprintf(plain, sizeof(plain), "%s/plain.bin", dir);
    write_shard(plain, PAIR_TOK, RN, NULL);
    snprintf(bad, sizeof(bad), "%s/pr_train_000000.bin,%s", dir, plain);
    expect_refused_at_open("pairs and other records in one pattern", bad, RW, "preference pairs, but");
    uint8_t m2[RN];
    memcpy(m2, PAIR_MASK, RN);
    m2[3] = 7; // the rejected record marked chosen: a chosen after a chosen
    snprintf(bad, sizeof(bad), "%s/bad_pairs.bin", dir);
    write_pairs(bad, m2);
    expect_refused_at_open("pairs out of order", bad, RW, "breaks the pairs' order");
    m2[3] = 11; m2[12] = 11; // a rejected record without its chosen one
    write_pairs(bad, m2);
    expect_refused_at_open("a rejected record without its chosen one", bad, RW, "breaks the pairs' order");
    test_pairs_partial(dir);
}

// Shards replaced during a run (data/prepare writes a new file and renames it over the old one):
// the loader goes on reading the files it checked, through the descriptors it keeps; where the
// open-file limit leaves no room to keep them (a child at a limit of 64), it reads by path and
// stops naming the file once it is no longer the one checked.
static void replace_shard(const char* path, int n, int first) {
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    uint16_t tok[64];
    for (int i = 0; i < n; i++) tok[i] = (uint16_t)(first + i);
    write_shard(tmp, tok, n, NULL);
    TEST_CHECK(rename(tmp, path) == 0, "rename over %s", path);
}
static void dl_replaced_at_limit(void* arg) {
    const char* p = (const char*)arg;
    struct rlimit rl = { 64, 64 };
    setrlimit(RLIMIT_NOFILE, &rl);
    DataLoader dl;
    dl_init(&dl, p, 1, 4, 0, 1, 2000, 0, 0);
    int in[4], tg[4];
    dl_next(&dl, in, tg, NULL);
    replace_shard(p, 9, 300);
    dl_next(&dl, in, tg, NULL);
    dl_free(&dl);
}
static void test_replaced(const char* dir) {
    char p[512];
    snprintf(p, sizeof(p), "%s/rp.bin", dir);
    replace_shard(p, 41, 100); // 10 batches of 4 tokens
    DataLoader dl;
    dl_init(&dl, p, 1, 4, 0, 1, 2000, 0, 0);
    int in[4], tg[4], same = 1;
    dl_next(&dl, in, tg, NULL);
    replace_shard(p, 9, 300); // (shorter: reading it past its end would fail)
    for (int b = 1; b < 12; b++) {
        dl_next(&dl, in, tg, NULL);
        const int k = b % 10;
        for (int t = 0; t < 4; t++) same &= in[t] == 100 + 4 * k + t && tg[t] == 101 + 4 * k + t;
    }
    TEST_CHECK(same, "a shard replaced during the run: the batches are the checked file's");
    dl_free(&dl);
    replace_shard(p, 41, 100);
    const char* w[] = { "rp.bin' changed during the run (replaced or rewritten after the loader checked it)", NULL };
    TEST_CHECK(test_expect_fatal("a shard replaced, read by path (no descriptor kept)", dl_replaced_at_limit, p, w), "replaced shard at the open-file limit");
    unlink(p);
    printf("ok   shards replaced during the run (data/prepare renames new files over them): read from the files checked; by path, refused naming the file\n");
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
    test_pairs(dir);
    test_stated(dir);
    test_range_at_open(dir);
    test_partial_eval(dir);
    test_replaced(dir);
    rmdir(dir);
    return test_finish("test_dataloader");
}
