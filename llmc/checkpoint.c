#include "checkpoint.h"
#include "check.h"
#include "fileio.h"
#include <dirent.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

void ckpt_path(char* out, size_t cap, const char* dir, const char* kind, long step, int rank) {
    char name[128];
    if (!strcmp(kind, "state")) snprintf(name, sizeof(name), "state_%08ld_%05d.bin", step, rank);
    else if (!strcmp(kind, "model")) snprintf(name, sizeof(name), "model_%08ld.bin", step);
    else if (!strcmp(kind, "adapter")) snprintf(name, sizeof(name), "adapter_%08ld/adapter_model.safetensors", step);
    else if (!strcmp(kind, "DONE")) snprintf(name, sizeof(name), "DONE_%08ld", step);
    else fatal("this is a bug in llmc", "unknown checkpoint file kind '%s'", kind);
    path_join(out, cap, dir, name);
}

long ckpt_find_latest(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return -1;
    long best = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        long step;
        char tail;
        if (sscanf(e->d_name, "DONE_%8ld%c", &step, &tail) == 1 && strlen(e->d_name) == 13 && step > best) best = step;
    }
    closedir(d);
    return best;
}

void ckpt_write_state(const char* path, const StateHeader* hdr, const float* m, const float* v, const float* master) {
    AtomicFile af;
    FILE* fp = atomic_open(&af, path);
    fwriteCheck(hdr->h, sizeof(int64_t), 128, fp, af.tmp_path);
    size_t n = (size_t)(hdr->h[SH_END] - hdr->h[SH_BEGIN]);
    fwriteCheck(m, sizeof(float), n, fp, af.tmp_path);
    fwriteCheck(v, sizeof(float), n, fp, af.tmp_path);
    if (hdr->h[SH_HAS_MASTER]) fwriteCheck(master, sizeof(float), n, fp, af.tmp_path);
    atomic_commit(&af);
}

void ckpt_read_state_header(const char* path, StateHeader* hdr) {
    FILE* fp = fopenCheck(path, "rb");
    freadCheck(hdr->h, sizeof(int64_t), 128, fp, path);
    fclose(fp);
    if (hdr->h[SH_MAGIC] != STATE_MAGIC) fatal("is this a state file written by train_gpt2 / train_lora?",
                                              "'%s': bad magic %lld", path, (long long)hdr->h[SH_MAGIC]);
    if (hdr->h[SH_VERSION] != STATE_VERSION) fatal("the checkpoint was written by an incompatible version",
                                                  "'%s': unsupported state version %lld", path, (long long)hdr->h[SH_VERSION]);
    int64_t n = hdr->h[SH_END] - hdr->h[SH_BEGIN];
    if (n < 0 || hdr->h[SH_BEGIN] < 0 || hdr->h[SH_END] > hdr->h[SH_TOTAL])
        fatal("the checkpoint is corrupt", "'%s': bad shard range [%lld, %lld)", path,
              (long long)hdr->h[SH_BEGIN], (long long)hdr->h[SH_END]);
    int64_t want = 1024 + n * 4 * (hdr->h[SH_HAS_MASTER] ? 3 : 2);
    if (file_size(path) != want) fatal("the checkpoint is truncated or corrupt", "'%s' has %lld bytes, expected %lld",
                                       path, (long long)file_size(path), (long long)want);
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

void ckpt_write_done(const char* dir, long step) {
    char path[LLMC_PATH_MAX];
    ckpt_path(path, sizeof(path), dir, "DONE", step, 0);
    atomic_write_file(path, "", 0);
}

// An adapter checkpoint's PEFT directory: its files (the tensors, adapter_config.json, the
// tokenizer files; no subdirectories), then the directory.
static void ckpt_remove_adapter_dir(const char* dir, long step) {
    char p[LLMC_PATH_MAX], f[LLMC_PATH_MAX];
    ckpt_path(p, sizeof(p), dir, "adapter", step, 0);
    *strrchr(p, '/') = '\0';
    DIR* d = opendir(p);
    if (!d) return;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        path_join(f, sizeof(f), p, e->d_name);
        unlink(f);
    }
    closedir(d);
    rmdir(p);
}

void ckpt_prune(const char* dir, int keep, int world) {
    if (keep <= 0) return;
    DIR* d = opendir(dir);
    if (!d) return;
    long steps[4096]; int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL && n < 4096) {
        long step; char tail;
        if (sscanf(e->d_name, "DONE_%8ld%c", &step, &tail) == 1 && strlen(e->d_name) == 13) steps[n++] = step;
    }
    closedir(d);
    // sort descending, drop everything after the newest `keep`
    for (int i = 0; i < n; i++) for (int j = i + 1; j < n; j++) if (steps[j] > steps[i]) { long t = steps[i]; steps[i] = steps[j]; steps[j] = t; }
    for (int i = keep; i < n; i++) {
        char p[LLMC_PATH_MAX];
        // the marker goes first, so a crash mid-prune never leaves a "complete" checkpoint with files missing
        ckpt_path(p, sizeof(p), dir, "DONE", steps[i], 0); unlink(p);
        ckpt_path(p, sizeof(p), dir, "model", steps[i], 0); unlink(p);
        ckpt_remove_adapter_dir(dir, steps[i]);
        for (int r = 0; r < world; r++) { ckpt_path(p, sizeof(p), dir, "state", steps[i], r); unlink(p); }
    }
}
