#include "run/runrecord.h"
#include "run/args.h"
#include "base/check.h"
#include "run/checkpoint.h"
#include "run/runlock.h"
#include "model/config.h"
#include "base/crc32c.h"
#include "base/fileio.h"
#include "base/gguf.h"
#include "base/json.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char* const WHY_MODEL = "the run trains this model: full training continues from the checkpoint's weights, "
                                     "and a LoRA checkpoint holds an adapter of this base";
static const char* const WHY_DATA = "the checkpoint's data position (epoch, shard, batch) is a position in these shards";
static const char* const WHY_VAL = "validation losses (the best one, early stopping) would no longer compare";
static const char* const WHY_BATCH = "the data position and each step's loss are counted in this batch geometry";
static const char* const WHY_ORDER = "the order of the data (and LoRA's dropout masks) follows --seed and --shuffle";
static const char* const WHY_LORA = "the adapter in the checkpoint has the recorded structure";
static const char* const WHY_PREF = "the run trains toward this objective, and its reference log-probabilities (ref_logps_*.bin) are this model's";

// Every flag of both trainers, by JSON key. A flag missing here is refused on resume (and
// test_runrecord fails), so a new flag must be placed.
static const struct { const char* key; ChangeKind kind; } RULES[] = {
    {"model", CHANGE_REFUSED}, {"train_data", CHANGE_REFUSED}, {"val_data", CHANGE_REFUSED},
    {"batch_size", CHANGE_REFUSED}, {"seq_len", CHANGE_REFUSED}, {"total_batch_tokens", CHANGE_REFUSED},
    {"seed", CHANGE_REFUSED}, {"shuffle", CHANGE_REFUSED},
    {"lora_rank", CHANGE_REFUSED}, {"lora_alpha", CHANGE_REFUSED}, {"lora_targets", CHANGE_REFUSED},
    {"lora_layers", CHANGE_REFUSED}, {"rslora", CHANGE_REFUSED}, {"dora", CHANGE_REFUSED}, {"lora_bias", CHANGE_REFUSED},
    {"train_ln_f", CHANGE_REFUSED}, {"adapter", CHANGE_REFUSED}, {"qlora", CHANGE_REFUSED},
    {"init", CHANGE_REFUSED},
    {"steps", CHANGE_SCHEDULE}, {"epochs", CHANGE_SCHEDULE}, {"lr", CHANGE_SCHEDULE},
    {"warmup_steps", CHANGE_SCHEDULE}, {"schedule", CHANGE_SCHEDULE}, {"final_lr_frac", CHANGE_SCHEDULE},
    {"cooldown_frac", CHANGE_SCHEDULE},
    {"weight_decay", CHANGE_OPTIMIZER}, {"grad_clip", CHANGE_OPTIMIZER}, {"beta1", CHANGE_OPTIMIZER},
    {"beta2", CHANGE_OPTIMIZER}, {"eps", CHANGE_OPTIMIZER}, {"lora_dropout", CHANGE_OPTIMIZER},
    {"lora_plus_ratio", CHANGE_OPTIMIZER}, // (B's learning rate from the next step on; AdamW's state does not depend on it)
    {"max_skipped_steps", CHANGE_OPTIMIZER}, {"loss_scale_window", CHANGE_OPTIMIZER},
    {"loss_scale_init", CHANGE_HARMLESS}, // (a resumed run takes the scale from its checkpoint)
    {"objective", CHANGE_REFUSED}, {"ref_model", CHANGE_REFUSED}, {"recompute_reference", CHANGE_INVOCATION},
    {"beta", CHANGE_OPTIMIZER}, {"label_smoothing", CHANGE_OPTIMIZER}, {"orpo_lambda", CHANGE_OPTIMIZER}, {"simpo_gamma", CHANGE_OPTIMIZER},
    {"eval_every", CHANGE_HARMLESS}, {"eval_batches", CHANGE_HARMLESS}, {"keep_best", CHANGE_HARMLESS},
    {"early_stopping_patience", CHANGE_HARMLESS}, {"early_stopping_min_delta", CHANGE_HARMLESS},
    {"save_every", CHANGE_HARMLESS}, {"keep_checkpoints", CHANGE_HARMLESS}, {"save_format", CHANGE_HARMLESS},
    {"save_gguf", CHANGE_HARMLESS},
    {"merge", CHANGE_HARMLESS}, {"sample_every", CHANGE_HARMLESS}, {"sample_tokens", CHANGE_HARMLESS},
    {"prompt", CHANGE_HARMLESS}, {"temperature", CHANGE_HARMLESS}, {"top_k", CHANGE_HARMLESS},
    {"top_p", CHANGE_HARMLESS}, {"min_p", CHANGE_HARMLESS}, {"repetition_penalty", CHANGE_HARMLESS},
    {"vocab", CHANGE_HARMLESS}, {"threads", CHANGE_HARMLESS}, {"watchdog_timeout", CHANGE_HARMLESS},
    {"deterministic", CHANGE_HARMLESS}, {"zero", CHANGE_HARMLESS}, {"recompute", CHANGE_HARMLESS},
    {"dtype", CHANGE_HARMLESS}, {"profile", CHANGE_HARMLESS}, {"tensorboard", CHANGE_HARMLESS},
    {"zero3_keep", CHANGE_HARMLESS}, {"shard_group", CHANGE_HARMLESS}, {"offload_optimizer", CHANGE_HARMLESS},
    {"memory_budget", CHANGE_HARMLESS}, {"memory_margin", CHANGE_HARMLESS},
    {"out", CHANGE_INVOCATION}, {"resume", CHANGE_INVOCATION}, {"stop_after", CHANGE_INVOCATION}, {"plan", CHANGE_INVOCATION},
};

static const char* refused_why(const char* key) {
    if (!strcmp(key, "model")) return WHY_MODEL;
    if (!strcmp(key, "train_data")) return WHY_DATA;
    if (!strcmp(key, "val_data")) return WHY_VAL;
    if (!strcmp(key, "seed") || !strcmp(key, "shuffle")) return WHY_ORDER;
    if (!strcmp(key, "objective") || !strcmp(key, "ref_model")) return WHY_PREF;
    if (!strncmp(key, "lora_", 5) || !strcmp(key, "rslora") || !strcmp(key, "dora") || !strcmp(key, "train_ln_f") || !strcmp(key, "adapter") ||
        !strcmp(key, "qlora") || !strcmp(key, "init")) return WHY_LORA;
    return WHY_BATCH;
}

static int is_path(const char* key) {
    return !strcmp(key, "model") || !strcmp(key, "train_data") || !strcmp(key, "val_data") || !strcmp(key, "adapter") || !strcmp(key, "ref_model");
}

int runrecord_change_kind(const char* key, ChangeKind* kind, const char** why) {
    for (size_t i = 0; i < sizeof(RULES) / sizeof(RULES[0]); i++) {
        if (strcmp(RULES[i].key, key)) continue;
        *kind = RULES[i].kind;
        *why = RULES[i].kind == CHANGE_REFUSED ? refused_why(key) : NULL;
        return 0;
    }
    *kind = CHANGE_REFUSED;
    *why = "this flag has no rule for resuming (a bug in llmc: please report it)";
    return -1;
}

// The record in dir: 1 and rec filled (free it with runconfig_free), or 0 when dir holds none.
// A record that does not read back is fatal, naming the file.
static int runrecord_read(const char* dir, RunConfig* rec) {
    char path[LLMC_PATH_MAX], err[1200];
    path_join(path, sizeof(path), dir, RUNRECORD_FILE);
    if (!file_exists(path)) return 0;
    size_t len = 0;
    char* text = read_file_all(path, &len);
    int rcode = runconfig_from_json(rec, text, len, path, err, sizeof(err));
    free(text);
    if (rcode) fatal("restore the file, or resume giving every flag after removing it", "the run's settings cannot be read: %s", err);
    return 1;
}

void runrecord_write(const RunConfig* rc) {
    char path[LLMC_PATH_MAX];
    path_join(path, sizeof(path), rc->f.out_dir, RUNRECORD_FILE);
    char* text = runconfig_to_json(rc);
    atomic_write_file(path, text, strlen(text));
    free(text);
}

// One path (a file, a directory or a glob) made absolute against the working directory: its
// directory part resolved (symbolic links too), the last part kept as written. A path whose
// directory does not exist stays as it is (opening it will say what is wrong).
static void absolute_path(const char* in, char* out, size_t cap) {
    const char* slash = strrchr(in, '/');
    char dir[LLMC_PATH_MAX], real[PATH_MAX];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - in) : 1, slash ? in : ".");
    const int n = in[0] != '/' && realpath(dir, real) ? snprintf(out, cap, "%s/%s", real, slash ? slash + 1 : in) : -1;
    if (n < 0 || (size_t)n >= cap) snprintf(out, cap, "%s", in);
}

// The file flags given on the command line made absolute (each item of a comma list), so that
// the record names the same files when the run is resumed from another directory, and a
// resume's flags compare with it. A model descriptor (d12, tiny) is no path.
static void absolute_paths(RunConfig* rc) {
    TrainFlags* f = &rc->f;
    const char** flags[] = {&f->model, &f->train_data, &f->val_data, &f->adapter, &f->sample.vocab, &f->ref_model};
    const char* names[] = {"--model", "--train-data", "--val-data", "--adapter", "--vocab", "--ref-model"};
    GPT2Config scratch;
    for (int i = 0; i < 6; i++) {
        const char* v = *flags[i];
        if (!v || !runconfig_given(rc, names[i]) || ((flags[i] == &f->model || flags[i] == &f->ref_model) && gpt2_config_from_descriptor(&scratch, v) == 0)) continue;
        char joined[3 * LLMC_PATH_MAX] = "", item[LLMC_PATH_MAX], abs[LLMC_PATH_MAX];
        for (const char* p = v; *p;) {
            const char* comma = strchr(p, ',');
            const size_t n = comma ? (size_t)(comma - p) : strlen(p);
            snprintf(item, sizeof(item), "%.*s", (int)n, p);
            absolute_path(item, abs, sizeof(abs));
            if (strlen(joined) + strlen(abs) + 2 > sizeof(joined)) fatal("give shorter paths", "%s: the paths are too long", names[i]);
            if (joined[0]) strcat(joined, ",");
            strcat(joined, abs);
            p += n + (comma ? 1 : 0);
        }
        runconfig_set_string(rc, flags[i], joined);
    }
}

// Compare the flags of rc with the recorded ones; fatal on a refused change, the others listed.
static void collect_changes(RunConfig* rc, const RunConfig* rec, RunChanges* ch) {
    RunConfig was = *rec; // a shallow copy to point a flag table at (the strings are rec's)
    ArgSpec now[RUNCFG_MAX_FLAGS], old[RUNCFG_MAX_FLAGS];
    const int n = runconfig_flag_table(rc, now);
    runconfig_flag_table(&was, old);
    ch->n = 0;
    for (int i = 0; i < n; i++) {
        char key[128], a[256], b[256];
        args_value_text(&old[i], a, sizeof(a));
        args_value_text(&now[i], b, sizeof(b));
        if (!strcmp(a, b)) continue;
        ChangeKind kind;
        const char* why;
        args_json_key(&now[i], key, sizeof(key));
        runrecord_change_kind(key, &kind, &why);
        if (kind == CHANGE_INVOCATION) continue;
        if (kind == CHANGE_REFUSED)
            fatal(is_path(key) ? "leave the flag out to resume (the recorded value is used), or start a new run in another --out; "
                                 "if only the files moved, edit the path in " RUNRECORD_FILE
                               : "leave the flag out to resume (the recorded value is used), or start a new run in another --out",
                  "%s %s differs from the run's recorded %s (%s in --out %s): %s", now[i].name, b, a, RUNRECORD_FILE,
                  rc->f.out_dir, why);
        RunChange* c = &ch->items[ch->n++];
        snprintf(c->flag, sizeof(c->flag), "%s", now[i].name);
        snprintf(c->before, sizeof(c->before), "%s", a);
        snprintf(c->after, sizeof(c->after), "%s", b);
        c->kind = kind;
    }
}

// A resume on another number of ranks keeps the global batch (tokens per step, as recorded) by
// gradient accumulation: refused, naming the rank counts that can, when `world` ranks' micro-
// batches do not divide it.
static void check_ranks_keep_batch(const RunConfig* rc, const char* dir, int world) {
    const int64_t micro = (int64_t)rc->f.batch_size * rc->f.seq_len, tokens = rc->f.total_batch_tokens;
    if (tokens <= 0 || tokens % micro != 0 || tokens % (micro * world) == 0) return; // (other errors: runconfig_derive)
    const int64_t q = tokens / micro;
    char ranks[256] = "", hint[512];
    int listed = 0;
    for (int64_t k = 1; k <= q && listed < 12; k++) {
        if (q % k) continue;
        size_t n = strlen(ranks);
        snprintf(ranks + n, sizeof(ranks) - n, "%s%lld", !listed ? "" : (k == q || listed == 11) ? " or " : ", ", (long long)k);
        listed++;
    }
    snprintf(hint, sizeof(hint), "resume on %s ranks (the global batch is whole micro-steps of --batch-size x --seq-len tokens on every rank)", ranks);
    fatal(hint, "the run's global batch is %lld tokens per step (recorded in %s/%s); %d ranks of %d x %d tokens do not divide it",
          (long long)tokens, dir, RUNRECORD_FILE, world, rc->f.batch_size, rc->f.seq_len);
}

// The configuration of a resumed run: rec (the record of the run in dir, the --out given) with
// the command line over it, derived for `world` ranks; the allowed changes in *changes.
static void resume_config(RunConfig* rc, const RunConfig* rec, const char* dir, TrainMode mode, int argc, char** argv,
                          int world, RunChanges* changes) {
    if (rec->mode != mode)
        fatal("resume it with the program that started it", "--out %s holds a %s run (its %s says so), not a %s one: resume it with %s",
              dir, runconfig_program(rec->mode), RUNRECORD_FILE, runconfig_program(mode), runconfig_program(rec->mode));
    runconfig_copy(rc, rec);
    rc->f.resume = NULL; // this invocation's own
    rc->f.stop_after = 0;
    rc->f.recompute_reference = 0;
    runconfig_parse_args(rc, argc, argv); // rc->given: exactly the command line's flags now
    if (rc->f.batch_size == ARG_AUTO) rc->f.batch_size = rec->f.batch_size; // (the micro-batch auto chose when the run started)
    absolute_paths(rc);
    const int cmd_steps = runconfig_given(rc, "--steps"), cmd_epochs = runconfig_given(rc, "--epochs");
    if (cmd_steps && !cmd_epochs) rc->f.epochs = 0; // the run's length given as steps replaces recorded epochs
    collect_changes(rc, rec, changes);
    // the record's flags stay given (e.g. --lora-dropout over an --adapter's own), except the
    // length the command line replaced
    ArgSpec specs[RUNCFG_MAX_FLAGS];
    const int n = runconfig_flag_table(rc, specs);
    for (int i = 0; i < n; i++) {
        const int replaced = (cmd_steps && !strcmp(specs[i].name, "--epochs")) || (cmd_epochs && !strcmp(specs[i].name, "--steps"));
        if (!replaced) rc->given[i] |= rec->given[i];
    }
    check_ranks_keep_batch(rc, dir, world);
    char err[1024];
    const char* hint = NULL;
    if (runconfig_derive(rc, world, err, sizeof(err), &hint) != 0) fatal(hint, "%s (with the settings recorded in %s)", err, RUNRECORD_FILE);
}

// A directory of its own for a run without --out: out/<program>-<date>-<time> (-2, -3, ... when
// that exists), chosen by rank 0 and sent to the others; made with the run's first write.
static void default_out_dir(Comm* comm, RunConfig* rc) {
    char dir[256] = {0};
    if (comm->rank == 0) {
        char stamp[64];
        time_t now = time(NULL);
        strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", localtime(&now));
        snprintf(dir, sizeof(dir), "out/%s-%s", runconfig_program(rc->mode), stamp);
        for (int k = 2; file_exists(dir) || dir_exists(dir); k++)
            snprintf(dir, sizeof(dir), "out/%s-%s-%d", runconfig_program(rc->mode), stamp, k);
        printf("output: %s (no --out given)\n", dir);
    }
    comm_broadcast(comm, dir, sizeof(dir), 0);
    runconfig_set_string(rc, &rc->f.out_dir, dir);
}

// A run directory without a record (written before records existed): at least the trainer
// must match, before the model is built from the wrong files.
static void check_state_mode(const char* dir, long step, TrainMode mode) {
    char path[LLMC_PATH_MAX];
    StateHeader h0;
    ckpt_path(path, sizeof(path), dir, "state", step, 0);
    ckpt_read_state_header(path, &h0);
    if (h0.h[SH_MODE] != mode)
        fatal("resume it with the program that started it", "--out %s holds a %s run (its checkpoint '%s' says so): resume it with %s",
              dir, runconfig_program((TrainMode)h0.h[SH_MODE]), path, runconfig_program((TrainMode)h0.h[SH_MODE]));
}

// ---------------------------------------------------------------------------------------------
// the base of a LoRA run: its files as the run started

// The shards a model.safetensors.index.json names (its "weight_map" values, each once) into out.
static void base_index_shards(const char* index, RunBaseFile* out, int* n) {
    size_t len = 0;
    char* text = read_file_all(index, &len);
    char err[256];
    JsonValue* root = json_parse(text, len, err, sizeof(err));
    free(text);
    const JsonValue* map = root ? json_get(root, "weight_map") : NULL;
    for (int i = 0; map && map->type == JSON_OBJECT && i < map->n; i++) {
        const char* shard = json_as_string(&map->items[i]);
        int seen = !shard || strlen(shard) >= sizeof(out->name);
        for (int k = 0; k < *n && !seen; k++) seen = !strcmp(out[k].name, shard);
        if (seen) continue;
        if (*n == RUNCFG_MAX_BASE_FILES) break; // (more shards than a GPT-2 has: the first ones stand for it)
        snprintf(out[(*n)++].name, sizeof(out->name), "%s", shard);
    }
    json_free(root); // (a broken index: the loader says what is wrong with it)
}

// The directory of --model (itself when it is one; returns whether it is).
static int base_dir_of(const char* model, char* dir, size_t cap) {
    const char* slash = strrchr(model, '/');
    if (dir_exists(model)) { snprintf(dir, cap, "%s", model); return 1; }
    snprintf(dir, cap, "%.*s", slash ? (int)(slash - model) : 1, slash ? model : ".");
    return 0;
}

// The files --model loads from (names relative to *dir): config.json and model.safetensors (or its
// index and shards) of a directory; a file, with its index's shards and the config.json beside
// it (which the loader reads for safetensors, not for an llm.c .bin or a GGUF file). None for a
// size descriptor (d12, tiny: drawn from --seed). Returns the count.
static int base_files_of(const char* model, char* dir, size_t cap, RunBaseFile* out) {
    GPT2Config scratch;
    char p[LLMC_PATH_MAX];
    int n = 0;
    memset(out, 0, sizeof(RunBaseFile) * RUNCFG_MAX_BASE_FILES);
    if (!model || gpt2_config_from_descriptor(&scratch, model) == 0) return 0;
    const int is_dir = base_dir_of(model, dir, cap);
    const char* slash = strrchr(model, '/');
    const char* file = is_dir ? NULL : slash ? slash + 1 : model;
    const size_t fl = file ? strlen(file) : 0;
    path_join(p, sizeof(p), dir, "config.json");
    if (file_exists(p) && (is_dir || ((fl < 4 || strcmp(file + fl - 4, ".bin") != 0) && !gguf_is_gguf(model))))
        snprintf(out[n++].name, sizeof(out->name), "config.json");
    if (is_dir) {
        path_join(p, sizeof(p), dir, "model.safetensors");
        file = file_exists(p) ? "model.safetensors" : "model.safetensors.index.json";
    }
    if (strlen(file) < sizeof(out->name)) snprintf(out[n++].name, sizeof(out->name), "%s", file);
    path_join(p, sizeof(p), dir, file);
    const size_t len = strlen(file);
    if (len > 5 && !strcmp(file + len - 5, ".json") && file_exists(p)) base_index_shards(p, out, &n);
    return n;
}

// Size and CRC-32C of each file; 0, or -1 with the first missing one in *missing.
static int base_measure(const char* dir, RunBaseFile* files, int n, int* missing) {
    char p[LLMC_PATH_MAX];
    for (int i = 0; i < n; i++) {
        path_join(p, sizeof(p), dir, files[i].name);
        if (!file_exists(p)) { *missing = i; return -1; }
        crc32c_file(p, &files[i].bytes, &files[i].crc);
    }
    return 0;
}

int runrecord_model_files(const char* model, RunBaseFile* out, char* missing, size_t cap) {
    char dir[LLMC_PATH_MAX];
    int miss = 0;
    const int n = base_files_of(model, dir, sizeof(dir), out);
    if (base_measure(dir, out, n, &miss) == 0) return n;
    path_join(missing, cap, dir, out[miss].name);
    return -1;
}

// A new LoRA run records its base's files (rank 0; the record is written once training starts).
static void base_record(RunConfig* rc) {
    char dir[LLMC_PATH_MAX];
    int missing;
    rc->nbase = 0;
    if (rc->mode != TRAIN_LORA) return;
    const int n = base_files_of(rc->f.model, dir, sizeof(dir), rc->base);
    if (base_measure(dir, rc->base, n, &missing) == 0) rc->nbase = n; // (a missing file: the loader says so)
}

// A resumed LoRA run: the base must be the recorded one, file for file (rank 0). A record
// without base files (an earlier version) is taken as it is.
static void base_check(const RunConfig* rc, const char* out) {
    if (rc->mode != TRAIN_LORA || rc->nbase == 0) return;
    char dir[LLMC_PATH_MAX], p[LLMC_PATH_MAX];
    const char* hint = "restore the base model the run was started with (the adapter in the checkpoint was trained on it), "
                       "or start a new run in another --out";
    base_dir_of(rc->f.model, dir, sizeof(dir));
    for (int i = 0; i < rc->nbase; i++) {
        RunBaseFile now = rc->base[i];
        int missing;
        path_join(p, sizeof(p), dir, now.name);
        if (base_measure(dir, &now, 1, &missing) != 0)
            fatal(hint, "the base model changed since the run in --out %s started: '%s' is missing (%s records it)", out, p, RUNRECORD_FILE);
        if (now.bytes != rc->base[i].bytes || now.crc != rc->base[i].crc)
            fatal(hint, "the base model changed since the run in --out %s started: '%s' has %llu bytes, CRC-32C %08x; %s records %llu bytes, "
                  "CRC-32C %08x (replaced or modified)", out, p, (unsigned long long)now.bytes, (unsigned)now.crc, RUNRECORD_FILE,
                  (unsigned long long)rc->base[i].bytes, (unsigned)rc->base[i].crc);
    }
}

// ---------------------------------------------------------------------------------------------

// The run's directory: locked for this job before anything in it is read (runlock.h). --plan
// writes nothing there and only reads the record (written atomically): no lock.
static void lock_out(Comm* comm, const RunConfig* rc, int argc, char** argv) {
    const char* out = rc->f.out_dir;
    if (out && strcmp(out, "none") != 0 && !rc->f.plan) runlock_acquire(comm, out, argc, argv);
}

void runrecord_start(RunStart* st, RunConfig* rc, Comm* comm, int argc, char** argv, TrainMode mode) {
    memset(st, 0, sizeof(*st));
    runconfig_defaults(rc, mode);
    runconfig_parse_args(rc, argc, argv);
    const char* out = rc->f.out_dir;
    st->resume_step = -1;
    lock_out(comm, rc, argc, argv);
    if (rc->f.resume && out && strcmp(out, "none")) { // (--resume without --out: runconfig_derive says it)
        st->resume_step = ckpt_find_latest(out);
        if (st->resume_step < 0 && !strcmp(rc->f.resume, "yes"))
            fatal("drop --resume to start a new run (--resume auto starts one when there is nothing to resume), or point --out at the run's directory",
                  "no complete checkpoint (DONE_* marker) in '%s'", out);
        if (st->resume_step < 0 && comm->rank == 0) printf("resume auto: no checkpoint in %s: starting a new run\n", out);
        if (st->resume_step >= 0 && !rc->f.plan) ckpt_verify(comm, out, st->resume_step); // every file against its manifest, before anything is read
    }
    if (st->resume_step >= 0 && runrecord_read(out, &st->rec)) {
        st->has_rec = 1;
        // the global batch in tokens (a record of an earlier version says 0: one micro-batch per
        // rank of the recorded ranks), so that a resume on other ranks keeps it by accumulation
        if (st->rec.f.total_batch_tokens == 0) st->rec.f.total_batch_tokens = st->rec.tokens_per_step;
        RunConfig cmd = *rc; // (rc is rebuilt from the record; cmd keeps the command line's strings)
        resume_config(rc, &st->rec, cmd.f.out_dir, mode, argc, argv, comm->world, &st->changes);
        runconfig_free(&cmd);
        if (comm->rank == 0 && !rc->f.plan) base_check(rc, rc->f.out_dir); // (--plan reads no weights)
        return;
    }
    if (st->resume_step >= 0) {
        check_state_mode(out, st->resume_step, mode);
        if (comm->rank == 0) printf("note: no %s in %s (a run of an earlier version): the settings come from the command line\n", RUNRECORD_FILE, out);
    }
    if (!out && !rc->f.resume && !rc->f.plan) { // (--plan: nothing to write)
        default_out_dir(comm, rc);
        lock_out(comm, rc, argc, argv);
    }
    absolute_paths(rc);
    char err[1024];
    const char* hint = NULL;
    if (runconfig_derive(rc, comm->world, err, sizeof(err), &hint) != 0) fatal(hint, "%s", err);
    // the record states the global batch in tokens, whatever the number of ranks (resuming on other
    // ranks keeps it)
    if (rc->f.total_batch_tokens == 0) rc->f.total_batch_tokens = rc->tokens_per_step;
    if (comm->rank == 0 && st->resume_step < 0 && !rc->f.plan) base_record(rc);
}

void runrecord_start_free(RunStart* st) {
    if (st->has_rec) runconfig_free(&st->rec);
    memset(st, 0, sizeof(*st));
}
