// ZeRO shard arithmetic (llmc/dist/zero.h) against brute force: every element's owner, every tensor
// range's intersection with every shard, bucket segments, and re-sharding round trips between all
// world sizes 1..8, exhaustively over small totals and alignments.
#include <stdint.h>
#include "../llmc/dist/zero.h"
#include "../llmc/model/params.h"
#include "../llmc/model/config.h"
#include "../llmc/base/check.h"
#include "test.h"

static TestRng g_rng = { 0x2545F4914F6CDD1DULL, 0 };
static uint64_t rnd(void) { return test_rand_u64(&g_rng); }
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

// Layout invariants and owner of every element.
static void check_layout(size_t total, int world, size_t align) {
    ZeroLayout z;
    zero_layout_init(&z, total, world, align);
    size_t unit = (size_t)world * align;
    int ok = z.padded >= total && z.padded % unit == 0 && z.padded - total < unit &&
             z.shard * (size_t)world == z.padded && z.shard % align == 0 && z.total == total;
    TEST_CHECK(ok, "layout total=%zu world=%d align=%zu: padded %zu shard %zu", total, world, align, z.padded, z.shard);
    // shards tile [0, padded) in rank order; owner agrees with [begin, end)
    size_t bad = 0;
    for (int r = 0; r < world; r++) {
        if (zero_shard_begin(&z, r) != (r == 0 ? 0 : zero_shard_end(&z, r - 1))) bad++;
        if (zero_shard_end(&z, r) - zero_shard_begin(&z, r) != z.shard) bad++;
        for (size_t i = zero_shard_begin(&z, r); i < zero_shard_end(&z, r); i++) if (zero_owner(&z, i) != r) bad++;
    }
    if (zero_shard_end(&z, world - 1) != z.padded) bad++;
    TEST_CHECK(bad == 0, "shard tiling total=%zu world=%d align=%zu: %zu problems", total, world, align, bad);
}

// Intersections of tensor ranges with every shard, against membership element by element.
static void check_intersect(const ZeroLayout* z, size_t offset, size_t numel) {
    size_t covered = 0, bad = 0;
    for (int r = 0; r < z->world; r++) {
        ZeroRange x = zero_intersect(z, r, offset, numel);
        if (x.end < x.begin) { bad++; continue; }
        covered += x.end - x.begin;
        for (size_t i = zero_shard_begin(z, r); i < zero_shard_end(z, r); i++) {
            int in_tensor = i >= offset && i < offset + numel;
            int in_x = i >= x.begin && i < x.end;
            if (in_tensor != in_x) bad++;
        }
        if (x.begin != x.end && (x.begin < zero_shard_begin(z, r) || x.end > zero_shard_end(z, r))) bad++;
    }
    TEST_CHECK(bad == 0 && covered == numel, "intersect [%zu,+%zu) world %d shard %zu: %zu bad, covered %zu",
               offset, numel, z->world, z->shard, bad, covered);
}

// Segments of a set of ranges: exact cover in order, right owners, packed offsets, maximal merging.
static void check_segments(const ZeroLayout* z, const ZeroRange* ranges, int nr) {
    int need = zero_segments(z, ranges, nr, NULL, 0);
    TEST_CHECK(need <= zero_segments_max(z, nr), "segments %d > bound %d", need, zero_segments_max(z, nr));
    ZeroSegment* seg = (ZeroSegment*)mallocCheck((size_t)(need + 1) * sizeof(ZeroSegment));
    int got = zero_segments(z, ranges, nr, seg, need);
    TEST_CHECK(got == need, "segments count %d vs %d", got, need);
    // walk the ranges' elements in order; segments must list the same elements in the same order
    size_t bad = 0, packed = 0; int s = 0; size_t pos = got ? seg[0].begin : 0;
    for (int k = 0; k < nr; k++) {
        for (size_t i = ranges[k].begin; i < ranges[k].end; i++, packed++) {
            while (s < got && pos == seg[s].end) { s++; if (s < got) pos = seg[s].begin; }
            if (s >= got) { bad++; continue; }
            if (pos != i || zero_owner(z, i) != seg[s].owner || seg[s].bucket_off + (pos - seg[s].begin) != packed) bad++;
            pos++;
        }
    }
    while (s < got && pos == seg[s].end) { s++; if (s < got) pos = seg[s].begin; }
    if (s != got) bad++;
    // maximal: no two consecutive segments could have been one
    for (int k = 1; k < got; k++) if (seg[k].owner == seg[k - 1].owner && seg[k].begin == seg[k - 1].end) bad++;
    for (int k = 0; k < got; k++) if (seg[k].begin >= seg[k].end) bad++;
    TEST_CHECK(bad == 0, "segments of %d ranges (world %d, shard %zu): %zu problems", nr, z->world, z->shard, bad);
    free(seg);
}

// Re-sharding: slice a full array for `from`, re-shard to every rank of `to`, compare with
// slicing for `to` directly, gather back, and go back to `from`.
static void check_reshard(size_t total, int wfrom, int wto, size_t afrom, size_t ato) {
    ZeroLayout zf, zt;
    zero_layout_init(&zf, total, wfrom, afrom);
    zero_layout_init(&zt, total, wto, ato);
    float* full = (float*)mallocCheck((total + 1) * sizeof(float));
    for (size_t i = 0; i < total; i++) full[i] = (float)(i + 1) * 0.5f;
    float** sf = (float**)mallocCheck((size_t)wfrom * sizeof(float*));
    float** st = (float**)mallocCheck((size_t)wto * sizeof(float*));
    float* want = (float*)mallocCheck((zt.shard + 1) * sizeof(float));
    for (int r = 0; r < wfrom; r++) {
        sf[r] = (float*)mallocCheck((zf.shard + 1) * sizeof(float));
        zero_slice_f32(&zf, r, full, sf[r]);
        for (size_t i = total; i < zero_shard_end(&zf, r); i++) // junk in old padding must not leak through
            if (i >= zero_shard_begin(&zf, r)) sf[r][i - zero_shard_begin(&zf, r)] = 1e30f;
    }
    size_t bad = 0;
    ZeroCopy plan[16];
    for (int r = 0; r < wto; r++) {
        st[r] = (float*)mallocCheck((zt.shard + 1) * sizeof(float));
        zero_reshard_f32(&zf, (const float* const*)sf, &zt, r, st[r]);
        zero_slice_f32(&zt, r, full, want);
        if (zt.shard && memcmp(st[r], want, zt.shard * sizeof(float)) != 0) bad++;
        int n = zero_reshard_plan(&zf, &zt, r, plan, 16);
        size_t cov = 0;
        for (int k = 0; k < n; k++) cov += plan[k].n;
        size_t real = zero_shard_end(&zt, r) > total ? (total > zero_shard_begin(&zt, r) ? total - zero_shard_begin(&zt, r) : 0) : zt.shard;
        if (n > wfrom || cov != real) bad++;
    }
    float* back = (float*)mallocCheck((total + 1) * sizeof(float));
    memset(back, 0, (total + 1) * sizeof(float));
    zero_gather_f32(&zt, (const float* const*)st, back);
    if (total && memcmp(back, full, total * sizeof(float)) != 0) bad++;
    // and back to the old layout: the real elements come back unchanged, the padding as zeros
    float* again = (float*)mallocCheck((zf.shard + 1) * sizeof(float));
    for (int r = 0; r < wfrom; r++) {
        zero_reshard_f32(&zt, (const float* const*)st, &zf, r, again);
        float* ref = (float*)mallocCheck((zf.shard + 1) * sizeof(float));
        zero_slice_f32(&zf, r, full, ref);
        if (zf.shard && memcmp(again, ref, zf.shard * sizeof(float)) != 0) bad++;
        free(ref);
    }
    TEST_CHECK(bad == 0, "reshard total=%zu %d(align %zu) -> %d(align %zu): %zu problems", total, wfrom, afrom, wto, ato, bad);
    for (int r = 0; r < wfrom; r++) free(sf[r]);
    for (int r = 0; r < wto; r++) free(st[r]);
    free(sf); free(st); free(want); free(full); free(back); free(again);
}

// GPT-2 buckets: every parameter element in exactly one bucket, per-layer buckets in backward order.
static void check_gpt2_buckets(void) {
    GPT2Config cfg;
    TEST_CHECK(gpt2_config_from_descriptor(&cfg, "tiny") == 0, "tiny config");
    ParamTable pt;
    params_build(&pt, &cfg);
    unsigned char* seen = (unsigned char*)callocCheck(pt.total, 1);
    ZeroRange r[ZERO_GPT2_MAX_RANGES];
    size_t bad = 0, maxb = 0;
    int L = cfg.num_layers;
    for (int b = 0; b < zero_gpt2_num_buckets(&pt); b++) {
        int n = zero_gpt2_bucket(&pt, b, r);
        size_t sz = 0;
        for (int k = 0; k < n; k++) {
            sz += r[k].end - r[k].begin;
            for (size_t i = r[k].begin; i < r[k].end; i++) {
                if (i >= pt.total || seen[i]) { bad++; continue; }
                seen[i] = 1;
                // which tensor / layer is i in?
                for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
                    const ParamInfo* t = &pt.t[id];
                    if (i < t->offset || i >= t->offset + t->numel) continue;
                    if (b < L) { if (!t->per_layer || (int)((i - t->offset) / params_layer_numel(&pt, (ParamId)id)) != L - 1 - b) bad++; }
                    else if (t->per_layer) bad++;
                }
            }
        }
        if (sz > maxb) maxb = sz;
        ZeroLayout z;
        for (int w = 1; w <= 5; w++) { zero_layout_init(&z, pt.total, w, 64); check_segments(&z, r, n); }
    }
    size_t unseen = 0;
    for (size_t i = 0; i < pt.total; i++) if (!seen[i]) unseen++;
    TEST_CHECK(bad == 0 && unseen == 0, "gpt2 buckets: %zu misplaced, %zu elements in no bucket", bad, unseen);
    TEST_CHECK(zero_gpt2_max_bucket(&pt) == maxb, "max bucket %zu vs %zu", zero_gpt2_max_bucket(&pt), maxb);
    free(seen);
}

int main(void) {
    const size_t aligns[] = { 1, 2, 3, 8, 64 };
    const int naligns = (int)(sizeof(aligns) / sizeof(aligns[0]));
    for (size_t total = 0; total <= 130; total++)
        for (int w = 1; w <= 8; w++)
            for (int a = 0; a < naligns; a++) check_layout(total, w, aligns[a]);
    printf("ok   layouts: totals 0..130 x worlds 1..8 x aligns {1,2,3,8,64}\n");

    // every tensor range [off, off+n) of the padded space, small cases exhaustively
    for (size_t total = 1; total <= 40; total += 3)
        for (int w = 1; w <= 6; w++)
            for (int a = 0; a < 3; a++) {
                ZeroLayout z; zero_layout_init(&z, total, w, aligns[a]);
                for (size_t off = 0; off <= z.padded; off++)
                    for (size_t n = 0; off + n <= z.padded; n++) check_intersect(&z, off, n);
            }
    printf("ok   intersections: every range of small padded spaces\n");

    // random non-overlapping range sets in random order
    for (int iter = 0; iter < 3000; iter++) {
        int w = 1 + (int)rnd_below(8);
        ZeroLayout z; zero_layout_init(&z, 1 + rnd_below(500), w, aligns[rnd_below(naligns)]);
        ZeroRange rs[16]; int nr = 0;
        size_t pos = 0;
        while (nr < 16 && pos < z.padded) {
            size_t gap = rnd_below(3) ? 0 : rnd_below(20);
            size_t b = pos + gap; if (b > z.padded) break;
            size_t e = b + rnd_below(z.padded - b + 1);
            if (rnd_below(4) == 0 && e > b + 40) e = b + 40;
            rs[nr].begin = b; rs[nr].end = e; nr++;
            pos = e;
        }
        for (int k = nr - 1; k > 0; k--) { int j = (int)rnd_below((size_t)k + 1); ZeroRange t = rs[k]; rs[k] = rs[j]; rs[j] = t; }
        check_segments(&z, rs, nr);
    }
    printf("ok   segments: 3000 random range sets\n");

    for (size_t total = 0; total <= 70; total += 7)
        for (int wf = 1; wf <= 8; wf++)
            for (int wt = 1; wt <= 8; wt++)
                check_reshard(total, wf, wt, aligns[(size_t)wf % (size_t)naligns], aligns[(size_t)wt % 3]);
    check_reshard(1000003, 3, 8, 64, 64);
    check_reshard(1000003, 8, 2, 64, 1);
    printf("ok   re-sharding: totals 0..70 x 1..8 -> 1..8 ranks, and 1e6 elements 3->8, 8->2\n");

    check_gpt2_buckets();
    printf("ok   gpt2 buckets (tiny model, worlds 1..5)\n");
    return test_finish("test_zero");
}
