// The DONE_SSSSSSSS commit record of a checkpoint (format in checkpoint.h): writing it after
// every rank finished, verifying every file against it before resuming, and the housekeeping of
// the output directory (finding the newest checkpoint, pruning, removing leftovers).
#define _GNU_SOURCE
#include "run/checkpoint.h"
#include "base/check.h"
#include "base/crc32c.h"
#include "base/fileio.h"
#include "base/json.h"
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

static const char* MANIFEST_FORMAT = "llmc-ft checkpoint";
// An adapter checkpoint is a PEFT directory, adapter_SSSSSSSS/; the manifest lists its tensors
#define ADAPTER_TENSORS "/adapter_model.safetensors"

// Exactly PREFIX + 8 digits + SUFFIX; the step, or -1.
static long parse_step_name(const char* name, const char* prefix, const char* suffix) {
    size_t np = strlen(prefix), ns = strlen(suffix), n = strlen(name);
    if (n != np + 8 + ns || strncmp(name, prefix, np) != 0 || strcmp(name + np + 8, suffix) != 0) return -1;
    long step = 0;
    for (size_t i = np; i < np + 8; i++) {
        if (name[i] < '0' || name[i] > '9') return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

// state_SSSSSSSS_RRRRR.bin: the step (and *rank), or -1.
static long parse_state_name(const char* name, int* rank) {
    if (strlen(name) != 24 || strncmp(name, "state_", 6) != 0 || name[14] != '_' || strcmp(name + 20, ".bin") != 0) return -1;
    char head[16];
    snprintf(head, sizeof(head), "%.14s", name); // "state_SSSSSSSS"
    long step = parse_step_name(head, "state_", "");
    int r = 0;
    for (int i = 15; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9') return -1;
        r = r * 10 + (name[i] - '0');
    }
    *rank = r;
    return step;
}

// The newest complete checkpoint (a DONE_ marker) in dir older than step `below`, or -1.
static long newest_done_below(const char* dir, long below) {
    DIR* d = opendir(dir);
    if (!d) return -1;
    long best = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        long step = parse_step_name(e->d_name, "DONE_", "");
        if (step < below && step > best) best = step;
    }
    closedir(d);
    return best;
}

long ckpt_find_latest(const char* dir) { return newest_done_below(dir, LONG_MAX); }

// ---------------------------------------------------------------------------------------------
// the manifest

void ckpt_manifest_free(CkptManifest* mf) {
    free(mf->files);
    memset(mf, 0, sizeof(*mf));
}

void ckpt_manifest_write(const char* dir, const CkptManifest* mf) {
    JsonWriter w;
    jw_init(&w, 1);
    jw_begin_object(&w);
    jw_key(&w, "format"); jw_string(&w, MANIFEST_FORMAT);
    jw_key(&w, "version"); jw_int(&w, CKPT_MANIFEST_VERSION);
    jw_key(&w, "step"); jw_int(&w, mf->step);
    jw_key(&w, "world"); jw_int(&w, mf->world);
    jw_key(&w, "files");
    jw_begin_array(&w);
    for (int i = 0; i < mf->nfiles; i++) {
        char hex[16];
        snprintf(hex, sizeof(hex), "%08x", (unsigned)mf->files[i].crc);
        jw_begin_object(&w);
        jw_key(&w, "name"); jw_string(&w, mf->files[i].name);
        jw_key(&w, "bytes"); jw_uint(&w, mf->files[i].bytes);
        jw_key(&w, "crc32c"); jw_string(&w, hex);
        jw_end_object(&w);
    }
    jw_end_array(&w);
    jw_end_object(&w);
    char path[LLMC_PATH_MAX];
    ckpt_path(path, sizeof(path), dir, "DONE", mf->step, 0);
    atomic_write_file(path, w.buf, w.len);
    jw_free(&w);
}

static int mf_fail(char* err, size_t cap, const char* what, const char* fmt, ...) {
    int n = snprintf(err, cap, "'%s': ", what);
    if (n >= 0 && (size_t)n < cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + n, cap - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// "%08x" text -> crc; 0 on success.
static int parse_crc_hex(const char* s, uint32_t* out) {
    if (!s || strlen(s) != 8) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = (v << 4) | (uint32_t)d;
    }
    *out = v;
    return 0;
}

// The checks on the parsed JSON tree; the file names must be exactly those of `step`.
static int mf_from_json(const JsonValue* root, const char* what, long step, CkptManifest* mf, char* err, size_t cap) {
    if (root->type != JSON_OBJECT) return mf_fail(err, cap, what, "not a JSON object");
    const char* fmt = json_as_string(json_get(root, "format"));
    int version, world;
    int64_t st;
    if (!fmt || strcmp(fmt, MANIFEST_FORMAT) != 0) return mf_fail(err, cap, what, "\"format\" is not \"%s\"", MANIFEST_FORMAT);
    if (!json_as_int(json_get(root, "version"), &version) || version != CKPT_MANIFEST_VERSION)
        return mf_fail(err, cap, what, "unsupported manifest \"version\" (this program reads %d)", CKPT_MANIFEST_VERSION);
    if (!json_as_int64(json_get(root, "step"), &st) || st != step)
        return mf_fail(err, cap, what, "\"step\" is not %ld (the step in the file name)", step);
    if (!json_as_int(json_get(root, "world"), &world) || world < 1 || world > CKPT_MAX_WORLD)
        return mf_fail(err, cap, what, "\"world\" must be an integer in [1, %d]", CKPT_MAX_WORLD);
    const JsonValue* files = json_get(root, "files");
    if (!files || files->type != JSON_ARRAY || files->n != world + 1)
        return mf_fail(err, cap, what, "\"files\" must list %d files (the model or adapter and one state file per rank)", world + 1);
    mf->step = step; mf->world = world; mf->nfiles = world + 1;
    mf->files = (CkptFile*)callocCheck((size_t)mf->nfiles, sizeof(CkptFile));
    for (int i = 0; i < mf->nfiles; i++) {
        const JsonValue* f = json_at(files, i);
        CkptFile* cf = &mf->files[i];
        const char* name = json_as_string(json_get(f, "name"));
        if (!name || strlen(name) >= sizeof(cf->name)) return mf_fail(err, cap, what, "files[%d] has no valid \"name\"", i);
        snprintf(cf->name, sizeof(cf->name), "%s", name);
        int rank = -1;
        int ok = i == 0 ? parse_step_name(name, "model_", ".bin") == step || parse_step_name(name, "adapter_", ADAPTER_TENSORS) == step
                        : parse_state_name(name, &rank) == step && rank == i - 1;
        if (!ok) return mf_fail(err, cap, what, "files[%d] is '%s', not the %s of step %ld", i, name,
                                i == 0 ? "model or adapter" : "state file of its rank", step);
        if (!json_as_uint64(json_get(f, "bytes"), &cf->bytes)) return mf_fail(err, cap, what, "'%s': \"bytes\" is not an integer", name);
        if (parse_crc_hex(json_as_string(json_get(f, "crc32c")), &cf->crc) != 0)
            return mf_fail(err, cap, what, "'%s': \"crc32c\" is not 8 lowercase hex digits", name);
    }
    return 0;
}

int ckpt_manifest_parse(const char* text, size_t len, const char* what, long step, CkptManifest* mf,
                        char* err, size_t errcap) {
    memset(mf, 0, sizeof(*mf));
    char jerr[256];
    if (len == 0) return mf_fail(err, errcap, what, "empty: a marker without checksums (written by an earlier version, or not by this program)");
    JsonValue* root = json_parse(text, len, jerr, sizeof(jerr));
    if (!root) return mf_fail(err, errcap, what, "%s", jerr);
    int rc = mf_from_json(root, what, step, mf, err, errcap);
    json_free(root);
    if (rc != 0) ckpt_manifest_free(mf);
    return rc;
}

int ckpt_manifest_try_read(const char* dir, long step, CkptManifest* mf, char* err, size_t errcap) {
    char path[LLMC_PATH_MAX];
    ckpt_path(path, sizeof(path), dir, "DONE", step, 0);
    memset(mf, 0, sizeof(*mf));
    int64_t size = file_size(path);
    if (size < 0) return mf_fail(err, errcap, path, "missing");
    if (size > (1 << 26)) return mf_fail(err, errcap, path, "%lld bytes: too large for a checkpoint manifest", (long long)size);
    size_t len;
    char* text = read_file_all(path, &len);
    int rc = ckpt_manifest_parse(text, len, path, step, mf, err, errcap);
    free(text);
    return rc;
}

void ckpt_manifest_read(const char* dir, long step, CkptManifest* mf) {
    char err[1024];
    if (ckpt_manifest_try_read(dir, step, mf, err, sizeof(err)) != 0)
        fatal("the checkpoint's DONE marker is not a valid manifest; delete it to resume from the previous checkpoint", "%s", err);
}

// ---------------------------------------------------------------------------------------------
// commit and verification

void ckpt_commit(Comm* c, const char* dir, long step, const char* main_kind) {
    int world = c->world, rank = c->rank;
    // slot 0: the model or adapter (rank 0), slot 1 + r: rank r's state file; every other rank
    // leaves a slot 0, so a sum over the ranks gathers them all
    size_t n = 2 * ((size_t)world + 1);
    int64_t* g = (int64_t*)callocCheck(n, sizeof(int64_t));
    char path[LLMC_PATH_MAX];
    uint64_t bytes;
    uint32_t crc;
    ckpt_path(path, sizeof(path), dir, "state", step, rank);
    crc32c_file(path, &bytes, &crc);
    g[2 * (1 + (size_t)rank)] = (int64_t)bytes;
    g[2 * (1 + (size_t)rank) + 1] = crc;
    if (rank == 0) {
        ckpt_path(path, sizeof(path), dir, main_kind, step, 0);
        crc32c_file(path, &bytes, &crc);
        g[0] = (int64_t)bytes;
        g[1] = crc;
    }
    comm_allreduce_sum_i64(c, g, n); // also the barrier: every rank has written its file
    if (rank == 0) {
        CkptManifest mf = { step, world, world + 1, (CkptFile*)callocCheck((size_t)world + 1, sizeof(CkptFile)) };
        for (int i = 0; i <= world; i++) {
            ckpt_name(mf.files[i].name, sizeof(mf.files[i].name), i == 0 ? main_kind : "state", step, i - 1);
            mf.files[i].bytes = (uint64_t)g[2 * i];
            mf.files[i].crc = (uint32_t)g[2 * i + 1];
        }
        ckpt_manifest_write(dir, &mf);
        ckpt_manifest_free(&mf);
    }
    free(g);
}

static void verify_file(const char* dir, long step, const CkptFile* f) {
    char path[LLMC_PATH_MAX], done[LLMC_PATH_MAX], hint[2 * LLMC_PATH_MAX];
    path_join(path, sizeof(path), dir, f->name);
    ckpt_path(done, sizeof(done), dir, "DONE", step, 0);
    long prev = newest_done_below(dir, step);   // for the hint
    if (prev >= 0) snprintf(hint, sizeof(hint), "the checkpoint of step %ld is damaged; delete '%s' to resume from the previous one (step %ld), or restore the file", step, done, prev);
    else snprintf(hint, sizeof(hint), "the checkpoint of step %ld is damaged and there is no earlier one; restore the file or start a new run", step);
    int64_t size = file_size(path);
    if (size < 0) fatal(hint, "'%s' is missing (listed in '%s')", path, done);
    if ((uint64_t)size != f->bytes)
        fatal(hint, "'%s' has %lld bytes, but '%s' records %llu (truncated or replaced after the checkpoint was written)",
              path, (long long)size, done, (unsigned long long)f->bytes);
    uint64_t bytes;
    uint32_t crc;
    crc32c_file(path, &bytes, &crc);
    if (bytes != f->bytes || crc != f->crc)
        fatal(hint, "'%s': checksum mismatch: CRC-32C %08x, but '%s' records %08x (the file changed after it was written: corrupted bytes)",
              path, (unsigned)crc, done, (unsigned)f->crc);
}

void ckpt_verify(Comm* c, const char* dir, long step) {
    CkptManifest mf;
    ckpt_manifest_read(dir, step, &mf);
    // the files are split over the ranks; a fatal() on one rank ends them all (comm.h)
    for (int i = 0; i < mf.nfiles; i++)
        if (i % c->world == c->rank) verify_file(dir, step, &mf.files[i]);
    ckpt_manifest_free(&mf);
    comm_barrier(c); // nobody reads a file before every file has been checked
}

// ---------------------------------------------------------------------------------------------
// housekeeping
//
// The protocol keeps its own record of the files it is writing or removing: PENDING_SSSSSSSS is
// written (atomically) before the first file of step S is written or removed, and removed when
// the step is complete (its DONE marker written) or gone. ckpt_clean removes exactly what such a
// record names, and temporaries of the files a run writes; a file that only looks like a
// checkpoint's (a model_SSSSSSSS.bin or adapter_SSSSSSSS/ a user keeps in --out and trains from)
// is never touched.

// A checkpoint entry of the run directory (a model or state file, an adapter directory): its
// step, else -1; *rank for state files.
static long ckpt_file_step(const char* name, int* rank) {
    *rank = -1;
    long s = parse_step_name(name, "model_", ".bin");
    if (s < 0) s = parse_step_name(name, "adapter_", "");
    if (s < 0) s = parse_state_name(name, rank);
    return s;
}

// Removes a checkpoint entry: a file, or an adapter checkpoint's directory (its files, it has no
// subdirectories, then itself). Returns 0 and adds the bytes removed to *bytes, or -1.
static int remove_entry(const char* path, uint64_t* bytes) {
    if (!dir_exists(path)) {
        int64_t sz = file_size(path);
        if (unlink(path) != 0) return -1;
        *bytes += sz > 0 ? (uint64_t)sz : 0;
        return 0;
    }
    DIR* d = opendir(path);
    if (!d) return -1;
    struct dirent* e;
    char p[LLMC_PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        path_join(p, sizeof(p), path, e->d_name);
        int64_t sz = file_size(p);
        if (unlink(p) == 0) *bytes += sz > 0 ? (uint64_t)sz : 0;
    }
    closedir(d);
    return rmdir(path);
}

// What ckpt_clean removed, for its one line.
typedef struct {
    int n;
    uint64_t bytes;
    char names[1024];
} Removed;

static void removed_add(Removed* rm, const char* name) {
    rm->n++;
    size_t used = strlen(rm->names);
    if (used + strlen(name) + 8 < sizeof(rm->names)) snprintf(rm->names + used, sizeof(rm->names) - used, "%s%s", used ? ", " : "", name);
}

// Every entry of step s in dir (the model or adapter, the state files of every rank), after its
// DONE marker.
static void remove_step(const char* dir, long s, Removed* rm) {
    char p[LLMC_PATH_MAX];
    ckpt_path(p, sizeof(p), dir, "DONE", s, 0);
    unlink(p);
    DIR* d = opendir(dir);
    if (!d) return;
    for (struct dirent* e; (e = readdir(d)) != NULL;) {
        int rank;
        if (ckpt_file_step(e->d_name, &rank) != s) continue;
        path_join(p, sizeof(p), dir, e->d_name);
        uint64_t bytes = 0;
        if (remove_entry(p, &bytes) == 0) { rm->bytes += bytes; removed_add(rm, e->d_name); }
    }
    closedir(d);
}

void ckpt_pending_begin(const char* dir, long step) {
    char p[LLMC_PATH_MAX], text[160];
    ckpt_path(p, sizeof(p), dir, "PENDING", step, 0);
    snprintf(text, sizeof(text), "{\"format\": \"llmc-ft checkpoint in progress\", \"step\": %ld}\n", step);
    atomic_write_file(p, text, strlen(text));
}

void ckpt_pending_end(const char* dir, long step) {
    char p[LLMC_PATH_MAX];
    ckpt_path(p, sizeof(p), dir, "PENDING", step, 0);
    if (unlink(p) != 0 && errno != ENOENT) fatal("check the permissions of --out", "cannot remove '%s': %s", p, strerror(errno));
}

void ckpt_remove(const char* dir, long step) {
    Removed rm;
    memset(&rm, 0, sizeof(rm));
    ckpt_pending_begin(dir, step); // a crash from here on leaves a record of what was going
    remove_step(dir, step, &rm);
    ckpt_pending_end(dir, step);
}

static int cmp_step_desc(const void* a, const void* b) {
    const long x = *(const long*)a, y = *(const long*)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// The steps of the entries named PREFIX + 8 digits in dir (DONE_, PENDING_), newest first; *n of
// them (malloc'd; NULL when none).
static long* steps_named(const char* dir, const char* prefix, int* n) {
    long* steps = NULL;
    int cap = 0;
    *n = 0;
    DIR* d = opendir(dir);
    if (!d) return NULL;
    for (struct dirent* e; (e = readdir(d)) != NULL;) {
        long step = parse_step_name(e->d_name, prefix, "");
        if (step < 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            steps = (long*)realloc(steps, (size_t)cap * sizeof(long));
            if (!steps) fatal(NULL, "out of memory listing the checkpoints");
        }
        steps[(*n)++] = step;
    }
    closedir(d);
    if (*n > 1) qsort(steps, (size_t)*n, sizeof(long), cmp_step_desc);
    return steps;
}

void ckpt_prune(const char* dir, int keep, long protect) {
    if (keep <= 0) return;
    int n;
    long* steps = steps_named(dir, "DONE_", &n);
    for (int i = keep; i < n; i++)
        if (steps[i] != protect) ckpt_remove(dir, steps[i]);
    free(steps);
}

// NAME.tmp.<digits>, where NAME is a file a run writes (fileio.h: the temporary of an atomic
// write): a checkpoint's, a marker, the record, the log, the stored reference of DPO / IPO
// (reflogps.h), or one of the model and adapter directories' files (run_outputs.h).
static int is_our_tmp(const char* name) {
    const size_t bl = atomic_tmp_base_len(name);
    char base[256];
    if (!bl || bl >= sizeof(base)) return 0;
    snprintf(base, sizeof(base), "%.*s", (int)bl, name);
    int rank;
    if (ckpt_file_step(base, &rank) >= 0 || parse_step_name(base, "DONE_", "") >= 0 || parse_step_name(base, "PENDING_", "") >= 0) return 1;
    static const char* const OUTPUT_FILES[] = {
        "run_config.json", "log.jsonl", "best.json", "config.json", "model.safetensors", "generation_config.json", "model.bin",
        "vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "adapter_config.json",
        "adapter_model.safetensors", "ref_logps_train.bin", "ref_logps_val.bin", NULL};
    for (int i = 0; OUTPUT_FILES[i]; i++) if (!strcmp(base, OUTPUT_FILES[i])) return 1;
    return 0;
}

// Removes the temporaries of one directory.
static void clean_tmp(const char* dir, Removed* rm) {
    DIR* d = opendir(dir);
    if (!d) return;
    char p[LLMC_PATH_MAX];
    for (struct dirent* e; (e = readdir(d)) != NULL;) {
        if (!is_our_tmp(e->d_name)) continue;
        path_join(p, sizeof(p), dir, e->d_name);
        uint64_t bytes = 0;
        if (!dir_exists(p) && remove_entry(p, &bytes) == 0) { rm->bytes += bytes; removed_add(rm, e->d_name); }
    }
    closedir(d);
}

// The steps a record says were in flight: without a DONE marker their files are removed (an
// interrupted save, or prune); with one the checkpoint is complete and only the record goes.
static void clean_pending(const char* dir, Removed* rm) {
    int n;
    long* steps = steps_named(dir, "PENDING_", &n);
    char p[LLMC_PATH_MAX];
    for (int i = 0; i < n; i++) {
        ckpt_path(p, sizeof(p), dir, "DONE", steps[i], 0);
        if (!file_exists(p)) remove_step(dir, steps[i], rm);
        ckpt_pending_end(dir, steps[i]);
    }
    free(steps);
}

void ckpt_clean(const char* dir) {
    Removed rm;
    memset(&rm, 0, sizeof(rm));
    char sub[LLMC_PATH_MAX];
    clean_tmp(dir, &rm);
    clean_pending(dir, &rm);
    // the other directories a run writes models into (llmc/run/run_outputs.h): --merge, the base for
    // base_model_name_or_path, and --keep-best's (with its --merge)
    const char* const subdirs[] = {"merged", "base", "best", "best/merged"};
    for (int i = 0; i < 4; i++) {
        path_join(sub, sizeof(sub), dir, subdirs[i]);
        clean_tmp(sub, &rm);
    }
    if (rm.n > 0)
        printf("cleanup: removed %d leftover file%s of interrupted saves or pruning in '%s' (%.1f MiB): %s%s\n",
               rm.n, rm.n == 1 ? "" : "s", dir, (double)rm.bytes / (1024.0 * 1024.0), rm.names,
               strlen(rm.names) + 64 >= sizeof(rm.names) ? ", ..." : "");
}
