// Checkpoint state files: writing, reading, and the validation of their headers (range of every
// field, consistency of all ranks' files). The DONE manifest, verification and directory
// housekeeping are in checkpoint_manifest.c.
#include "run/checkpoint.h"
#include "base/check.h"
#include "base/fileio.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c assumes a little-endian host (the state files are little-endian)"
#endif

static const char* const SH_NAMES[SH_NUM_FIELDS] = {
    "magic", "version", "world", "rank", "has_master", "step", "opt_t", "unused_7",
    "dl_epoch", "dl_shard", "dl_chunk", "begin", "end", "total", "mode", "batch_size", "seq_len",
    "accum", "skipped", "zero", "seed", "tokens_per_step", "shuffle",
    "val_tracked", "best_val_bits", "best_step", "evals_since_best", "no_targets",
    "loss_scale_bits", "scale_growth",
};

static const char* HINT_CORRUPT = "the checkpoint is corrupt; delete its DONE_* marker to resume from the previous checkpoint";

void ckpt_name(char* out, size_t cap, const char* kind, long step, int rank) {
    if (!strcmp(kind, "state")) snprintf(out, cap, "state_%08ld_%05d.bin", step, rank);
    else if (!strcmp(kind, "model")) snprintf(out, cap, "model_%08ld.bin", step);
    else if (!strcmp(kind, "adapter")) snprintf(out, cap, "adapter_%08ld/adapter_model.safetensors", step);
    else if (!strcmp(kind, "DONE")) snprintf(out, cap, "DONE_%08ld", step);
    else if (!strcmp(kind, "PENDING")) snprintf(out, cap, "PENDING_%08ld", step);
    else fatal("this is a bug in llmc", "unknown checkpoint file kind '%s'", kind);
}

void ckpt_path(char* out, size_t cap, const char* dir, const char* kind, long step, int rank) {
    char name[64];
    ckpt_name(name, sizeof(name), kind, step, rank);
    path_join(out, cap, dir, name);
}

size_t ckpt_stage_elems(size_t n) { return n < CKPT_STAGE_ELEMS ? n : CKPT_STAGE_ELEMS; }

void ckpt_state_begin(CkptStateWriter* w, const char* path, const StateHeader* hdr) {
    memset(w, 0, sizeof(*w));
    w->n = (size_t)(hdr->h[SH_END] - hdr->h[SH_BEGIN]);
    w->arrays = hdr->h[SH_HAS_MASTER] ? 3 : 2;
    FILE* fp = atomic_open(&w->af, path);
    fwriteCheck(hdr->h, sizeof(int64_t), 128, fp, w->af.tmp_path);
}

void ckpt_state_put(CkptStateWriter* w, const float* x, size_t n) {
    if (n > w->n * (size_t)w->arrays - w->written)
        fatal("this is a bug in llmc", "'%s': %zu more elements than the state's %d arrays of %zu", w->af.tmp_path, n, w->arrays, w->n);
    fwriteCheck(x, sizeof(float), n, w->af.fp, w->af.tmp_path);
    w->written += n;
}

void ckpt_state_end(CkptStateWriter* w) {
    if (w->written != w->n * (size_t)w->arrays)
        fatal("this is a bug in llmc", "'%s': %zu elements written of the state's %d arrays of %zu", w->af.tmp_path, w->written, w->arrays, w->n);
    atomic_commit(&w->af);
}

void ckpt_write_state(const char* path, const StateHeader* hdr, const float* m, const float* v, const float* master) {
    CkptStateWriter w;
    ckpt_state_begin(&w, path, hdr);
    ckpt_state_put(&w, m, w.n);
    ckpt_state_put(&w, v, w.n);
    if (w.arrays == 3) ckpt_state_put(&w, master, w.n);
    ckpt_state_end(&w);
}

static void sh_range(const char* path, const StateHeader* hdr, StateField f, int64_t lo, int64_t hi) {
    int64_t v = hdr->h[f];
    if (v < lo || v > hi)
        fatal(HINT_CORRUPT, "'%s': header field %s = %lld is out of range [%lld, %lld]", path, SH_NAMES[f],
              (long long)v, (long long)lo, (long long)hi);
}

// Every field against the range this program can have written; the arithmetic below stays far
// from int64 overflow because each factor is bounded first.
static void sh_validate_val(const char* path, const StateHeader* hdr);
static void sh_validate(const char* path, const StateHeader* hdr) {
    const int64_t* h = hdr->h;
    sh_range(path, hdr, SH_WORLD, 1, CKPT_MAX_WORLD);
    sh_range(path, hdr, SH_RANK, 0, h[SH_WORLD] - 1);
    sh_range(path, hdr, SH_HAS_MASTER, 0, 1);
    sh_range(path, hdr, SH_STEP, 0, CKPT_MAX_STEP);
    sh_range(path, hdr, SH_OPT_T, 0, h[SH_STEP]);
    sh_range(path, hdr, SH_SKIPPED, 0, h[SH_STEP]);
    sh_range(path, hdr, SH_NO_TARGETS, 0, h[SH_STEP]);
    if (h[SH_OPT_T] + h[SH_SKIPPED] + h[SH_NO_TARGETS] != h[SH_STEP]) // every step updated, was skipped, or had no target
        fatal(HINT_CORRUPT, "'%s': header says step %lld but %lld updates + %lld skipped steps + %lld steps without targets", path,
              (long long)h[SH_STEP], (long long)h[SH_OPT_T], (long long)h[SH_SKIPPED], (long long)h[SH_NO_TARGETS]);
    sh_validate_val(path, hdr);
    sh_range(path, hdr, SH_DL_EPOCH, 0, INT64_MAX);
    sh_range(path, hdr, SH_DL_SHARD, 0, INT32_MAX);
    sh_range(path, hdr, SH_TOTAL, 1, CKPT_MAX_ELEMS);
    sh_range(path, hdr, SH_BEGIN, 0, h[SH_TOTAL]);
    sh_range(path, hdr, SH_END, h[SH_BEGIN], h[SH_TOTAL]);
    sh_range(path, hdr, SH_MODE, 0, 1);
    sh_range(path, hdr, SH_B, 1, 65536);
    sh_range(path, hdr, SH_T, 1, 1 << 20);
    sh_range(path, hdr, SH_ZERO, 0, 3); // (ZeRO 3 writes its state in the ZeRO-1 layout)
    sh_range(path, hdr, SH_SEED, 0, INT32_MAX);
    sh_range(path, hdr, SH_SHUFFLE, 0, 1);
    int64_t micro = h[SH_B] * h[SH_T] * h[SH_WORLD]; // <= 2^16 * 2^20 * 2^17
    sh_range(path, hdr, SH_ACCUM, 1, INT64_MAX / micro);
    // the data position: chunks of one global micro-batch into a shard, whose token count is an int32
    sh_range(path, hdr, SH_DL_CHUNK, 0, INT32_MAX / micro);
    if (h[SH_TOKENS_PER_STEP] != micro * h[SH_ACCUM])
        fatal(HINT_CORRUPT, "'%s': header says %lld tokens per step, but batch %lld x %lld x %lld ranks x %lld accumulation = %lld",
              path, (long long)h[SH_TOKENS_PER_STEP], (long long)h[SH_B], (long long)h[SH_T], (long long)h[SH_WORLD],
              (long long)h[SH_ACCUM], (long long)(micro * h[SH_ACCUM]));
    for (int i = SH_NUM_FIELDS; i < 128; i++)
        if (h[i] != 0) fatal(HINT_CORRUPT, "'%s': header word %d is %lld; this version writes 0 there", path, i, (long long)h[i]);
    // the loss scale: none, or a finite fp32 of at least 1 (a run stops when it falls below)
    sh_range(path, hdr, SH_LOSS_SCALE_BITS, 0, UINT32_MAX);
    float scale;
    const uint32_t bits = (uint32_t)h[SH_LOSS_SCALE_BITS];
    memcpy(&scale, &bits, sizeof(scale));
    if (bits && !(isfinite(scale) && scale >= 1.0f))
        fatal(HINT_CORRUPT, "'%s': header field loss_scale_bits = %#x is no loss scale (a finite fp32 of at least 1)", path, bits);
    sh_range(path, hdr, SH_SCALE_GROWTH, 0, bits ? INT32_MAX : 0);
}

// The validation tracking: a best loss (finite, of a step so far) only when tracked; at most one
// evaluation per step index 0 .. step.
static void sh_validate_val(const char* path, const StateHeader* hdr) {
    const int64_t* h = hdr->h;
    double best;
    memcpy(&best, &h[SH_BEST_VAL_BITS], sizeof(best));
    sh_range(path, hdr, SH_VAL_TRACKED, 0, 1);
    sh_range(path, hdr, SH_BEST_STEP, 0, h[SH_VAL_TRACKED] ? h[SH_STEP] : 0);
    sh_range(path, hdr, SH_EVALS_SINCE_BEST, 0, h[SH_STEP] + 1);
    if (h[SH_VAL_TRACKED] ? !isfinite(best) : h[SH_BEST_VAL_BITS] != 0)
        fatal(HINT_CORRUPT, "'%s': header field best_val_bits = %#llx is no %s", path, (unsigned long long)h[SH_BEST_VAL_BITS],
              h[SH_VAL_TRACKED] ? "finite loss" : "0 (no best loss is tracked)");
}

void ckpt_read_state_header(const char* path, StateHeader* hdr) {
    int64_t size = file_size(path);
    if (size < (int64_t)sizeof(hdr->h))
        fatal(HINT_CORRUPT, "'%s': %lld bytes, shorter than the 1024-byte state header", path, (long long)size);
    FILE* fp = fopenCheck(path, "rb");
    freadCheck(hdr->h, sizeof(int64_t), 128, fp, path);
    fclose(fp);
    if (hdr->h[SH_MAGIC] != STATE_MAGIC) fatal("is this a state file written by train_gpt2 / train_lora?",
                                              "'%s': bad magic %lld", path, (long long)hdr->h[SH_MAGIC]);
    if (hdr->h[SH_VERSION] != STATE_VERSION) fatal("the checkpoint was written by an incompatible version",
                                                  "'%s': unsupported state version %lld", path, (long long)hdr->h[SH_VERSION]);
    sh_validate(path, hdr);
    // n <= 2^40 after validation, so the size cannot overflow
    int64_t n = hdr->h[SH_END] - hdr->h[SH_BEGIN];
    int64_t want = 1024 + n * 4 * (hdr->h[SH_HAS_MASTER] ? 3 : 2);
    if (size != want) fatal("the checkpoint is truncated or corrupt", "'%s' has %lld bytes, expected %lld",
                            path, (long long)size, (long long)want);
}

// The fields every rank's header must agree on (what the run is and where it stands).
static const StateField SHARED_FIELDS[] = {
    SH_WORLD, SH_HAS_MASTER, SH_STEP, SH_OPT_T, SH_DL_EPOCH, SH_DL_SHARD, SH_DL_CHUNK, SH_TOTAL,
    SH_MODE, SH_B, SH_T, SH_ACCUM, SH_SKIPPED, SH_ZERO, SH_SEED, SH_TOKENS_PER_STEP, SH_SHUFFLE,
    SH_VAL_TRACKED, SH_BEST_VAL_BITS, SH_BEST_STEP, SH_EVALS_SINCE_BEST, SH_NO_TARGETS,
};

void ckpt_check_states(const char* dir, long step, StateHeader* h0) {
    CkptManifest mf;
    ckpt_manifest_read(dir, step, &mf);
    const char* mix = "the checkpoint directory mixes files of different runs or checkpoints";
    char path[LLMC_PATH_MAX];
    int64_t prev_end = 0;
    for (int q = 0; q < mf.world; q++) {
        StateHeader hq;
        ckpt_path(path, sizeof(path), dir, "state", step, q);
        ckpt_read_state_header(path, &hq);
        if (q == 0) {
            *h0 = hq;
            if (hq.h[SH_WORLD] != mf.world || hq.h[SH_STEP] != step)
                fatal(mix, "'%s' belongs to step %lld of a %lld-rank run; DONE_%08ld lists %d ranks at step %ld",
                      path, (long long)hq.h[SH_STEP], (long long)hq.h[SH_WORLD], step, mf.world, step);
        }
        if (hq.h[SH_RANK] != q) fatal(mix, "'%s' holds the state of rank %lld", path, (long long)hq.h[SH_RANK]);
        for (size_t k = 0; k < sizeof(SHARED_FIELDS) / sizeof(SHARED_FIELDS[0]); k++) {
            StateField f = SHARED_FIELDS[k];
            if (hq.h[f] != h0->h[f])
                fatal(mix, "'%s': %s = %lld, but rank 0's state file says %lld", path, SH_NAMES[f],
                      (long long)hq.h[f], (long long)h0->h[f]);
        }
        // the ranges: every rank the whole space (one rank, or ZeRO 0), else consecutive shards
        int whole = mf.world == 1 || hq.h[SH_ZERO] == 0;
        int64_t want_begin = whole ? 0 : prev_end;
        int last = q == mf.world - 1;
        if (hq.h[SH_BEGIN] != want_begin || ((whole || last) && hq.h[SH_END] != hq.h[SH_TOTAL]))
            fatal(HINT_CORRUPT, "'%s': optimizer range [%lld, %lld) of %lld elements does not continue the other ranks' ranges (expected to begin at %lld%s)",
                  path, (long long)hq.h[SH_BEGIN], (long long)hq.h[SH_END], (long long)hq.h[SH_TOTAL], (long long)want_begin,
                  whole || last ? " and end at the total" : "");
        prev_end = hq.h[SH_END];
    }
    ckpt_manifest_free(&mf);
}

size_t ckpt_read_state_overlap(const char* path, const StateHeader* hdr, size_t begin, size_t end,
                               float* m, float* v, float* master) {
    size_t fb = (size_t)hdr->h[SH_BEGIN], fe = (size_t)hdr->h[SH_END], n = fe - fb;
    size_t b = fb > begin ? fb : begin, e = fe < end ? fe : end;
    if (b >= e) return 0;
    FILE* fp = fopenCheck(path, "rb");
    float* dst[3] = { m, v, master };
    int parts = hdr->h[SH_HAS_MASTER] ? 3 : 2;
    for (int k = 0; k < parts; k++) {
        if (!dst[k]) continue;
        fseekCheck(fp, (long)(1024 + ((size_t)k * n + (b - fb)) * sizeof(float)), SEEK_SET, path);
        freadCheck(dst[k] + (b - begin), sizeof(float), e - b, fp, path);
    }
    fclose(fp);
    return e - b;
}
