#include <string.h>
#include "dist/zero.h"
#include "base/check.h"

void zero_layout_init(ZeroLayout* z, size_t total, int world, size_t align) {
    if (world < 1) fatal(NULL, "ZeRO layout: world size %d must be at least 1", world);
    if (align < 1) fatal(NULL, "ZeRO layout: alignment must be at least 1 element");
    size_t unit = (size_t)world * align;
    memset(z, 0, sizeof(*z));
    z->total = total;
    z->padded = (total + unit - 1) / unit * unit;
    z->shard = z->padded / (size_t)world;
    z->align = align;
    z->world = world;
}

int zero_owner(const ZeroLayout* z, size_t i) {
    assertCheck(i < z->padded);
    return (int)(i / z->shard);
}

ZeroRange zero_intersect(const ZeroLayout* z, int rank, size_t offset, size_t numel) {
    size_t b = zero_shard_begin(z, rank), e = zero_shard_end(z, rank);
    ZeroRange r;
    r.begin = offset > b ? offset : b;
    r.end = offset + numel < e ? offset + numel : e;
    if (r.end <= r.begin) r.begin = r.end = b; // empty
    return r;
}

int zero_segments(const ZeroLayout* z, const ZeroRange* ranges, int nranges, ZeroSegment* out, int cap) {
    int n = 0, have = 0;
    size_t packed = 0;
    ZeroSegment cur = { 0, 0, 0, 0 };
    for (int k = 0; k < nranges; k++) {
        size_t b = ranges[k].begin, e = ranges[k].end;
        if (e < b || e > z->padded)
            fatal(NULL, "zero_segments: range [%zu, %zu) is not inside the padded parameter space [0, %zu)", b, e, z->padded);
        while (b < e) {
            int owner = zero_owner(z, b);
            size_t stop = zero_shard_end(z, owner);
            if (stop > e) stop = e;
            if (have && cur.owner == owner && cur.end == b && cur.bucket_off + (cur.end - cur.begin) == packed) {
                cur.end = stop; // continues the current segment in flat and packed space
            } else {
                if (have) { if (n < cap) out[n] = cur; n++; }
                cur.begin = b; cur.end = stop; cur.bucket_off = packed; cur.owner = owner;
                have = 1;
            }
            packed += stop - b;
            b = stop;
        }
    }
    if (have) { if (n < cap) out[n] = cur; n++; }
    return n;
}

int zero_gpt2_bucket(const ParamTable* pt, int bucket, ZeroRange* out) {
    int L = pt->cfg.num_layers;
    if (bucket < 0 || bucket > L) fatal(NULL, "zero_gpt2_bucket: bucket %d out of range [0, %d]", bucket, L);
    int n = 0;
    if (bucket < L) {
        int l = L - 1 - bucket;
        for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
            if (!pt->t[id].per_layer) continue;
            size_t off = params_layer_offset(pt, (ParamId)id, l);
            out[n].begin = off; out[n].end = off + params_layer_numel(pt, (ParamId)id); n++;
        }
    } else {
        for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
            if (pt->t[id].per_layer) continue;
            out[n].begin = pt->t[id].offset; out[n].end = pt->t[id].offset + pt->t[id].numel; n++;
        }
    }
    assertCheck(n <= ZERO_GPT2_MAX_RANGES);
    return n;
}

size_t zero_gpt2_max_bucket(const ParamTable* pt) {
    size_t best = 0;
    ZeroRange r[ZERO_GPT2_MAX_RANGES];
    for (int b = 0; b < zero_gpt2_num_buckets(pt); b++) {
        int n = zero_gpt2_bucket(pt, b, r);
        size_t s = 0;
        for (int k = 0; k < n; k++) s += r[k].end - r[k].begin;
        if (s > best) best = s;
    }
    return best;
}

static void check_same_total(const ZeroLayout* from, const ZeroLayout* to) {
    if (from->total != to->total)
        fatal("resume with the same model and trainable parameters the checkpoint was written for",
              "re-sharding optimizer state: the checkpoint covers %zu parameters, this run has %zu",
              from->total, to->total);
}

int zero_reshard_plan(const ZeroLayout* from, const ZeroLayout* to, int to_rank, ZeroCopy* out, int cap) {
    check_same_total(from, to);
    if (to_rank < 0 || to_rank >= to->world) fatal(NULL, "zero_reshard_plan: rank %d of %d", to_rank, to->world);
    // the new shard's real elements: [b, e) in flat indices, padding excluded
    size_t b = zero_shard_begin(to, to_rank), e = zero_shard_end(to, to_rank);
    if (e > to->total) e = to->total;
    int n = 0;
    while (b < e) {
        int src = (int)(b / from->shard);
        size_t stop = zero_shard_end(from, src);
        if (stop > e) stop = e;
        if (n >= cap) fatal(NULL, "zero_reshard_plan: plan array too small (%d)", cap);
        out[n].src_rank = src;
        out[n].src_off = b - zero_shard_begin(from, src);
        out[n].dst_off = b - zero_shard_begin(to, to_rank);
        out[n].n = stop - b;
        n++;
        b = stop;
    }
    return n;
}

void zero_reshard_f32(const ZeroLayout* from, const float* const* src, const ZeroLayout* to, int to_rank, float* dst) {
    ZeroCopy stack[64];
    ZeroCopy* plan = from->world <= 64 ? stack : (ZeroCopy*)mallocCheck((size_t)from->world * sizeof(ZeroCopy));
    int n = zero_reshard_plan(from, to, to_rank, plan, from->world);
    memset(dst, 0, to->shard * sizeof(float));
    for (int k = 0; k < n; k++)
        memcpy(dst + plan[k].dst_off, src[plan[k].src_rank] + plan[k].src_off, plan[k].n * sizeof(float));
    if (plan != stack) free(plan);
}

void zero_gather_f32(const ZeroLayout* z, const float* const* shards, float* full) {
    for (int r = 0; r < z->world; r++) {
        size_t b = zero_shard_begin(z, r), e = zero_shard_end(z, r);
        if (e > z->total) e = z->total;
        if (b < e) memcpy(full + b, shards[r], (e - b) * sizeof(float));
    }
}

void zero_slice_f32(const ZeroLayout* z, int rank, const float* full, float* shard) {
    size_t b = zero_shard_begin(z, rank), e = zero_shard_end(z, rank);
    size_t real_end = e > z->total ? z->total : e;
    size_t n = real_end > b ? real_end - b : 0;
    if (n) memcpy(shard, full + b, n * sizeof(float));
    memset(shard + n, 0, (z->shard - n) * sizeof(float));
}
