#include "run/runrecord.h"
#include "run/args.h"
#include "base/check.h"
#include "run/checkpoint.h"
#include "model/config.h"
#include "base/fileio.h"
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

// Every flag of both trainers, by JSON key. A flag missing here is refused on resume (and
// test_runrecord fails), so a new flag must be placed.
static const struct { const char* key; ChangeKind kind; } RULES[] = {
    {"model", CHANGE_REFUSED}, {"train_data", CHANGE_REFUSED}, {"val_data", CHANGE_REFUSED},
    {"batch_size", CHANGE_REFUSED}, {"seq_len", CHANGE_REFUSED}, {"total_batch_tokens", CHANGE_REFUSED},
    {"seed", CHANGE_REFUSED}, {"shuffle", CHANGE_REFUSED},
    {"lora_rank", CHANGE_REFUSED}, {"lora_alpha", CHANGE_REFUSED}, {"lora_targets", CHANGE_REFUSED},
    {"lora_layers", CHANGE_REFUSED}, {"rslora", CHANGE_REFUSED}, {"lora_bias", CHANGE_REFUSED},
    {"train_ln_f", CHANGE_REFUSED}, {"adapter", CHANGE_REFUSED}, {"qlora", CHANGE_REFUSED},
    {"steps", CHANGE_SCHEDULE}, {"epochs", CHANGE_SCHEDULE}, {"lr", CHANGE_SCHEDULE},
    {"warmup_steps", CHANGE_SCHEDULE}, {"schedule", CHANGE_SCHEDULE}, {"final_lr_frac", CHANGE_SCHEDULE},
    {"cooldown_frac", CHANGE_SCHEDULE},
    {"weight_decay", CHANGE_OPTIMIZER}, {"grad_clip", CHANGE_OPTIMIZER}, {"beta1", CHANGE_OPTIMIZER},
    {"beta2", CHANGE_OPTIMIZER}, {"eps", CHANGE_OPTIMIZER}, {"lora_dropout", CHANGE_OPTIMIZER},
    {"max_skipped_steps", CHANGE_OPTIMIZER},
    {"eval_every", CHANGE_HARMLESS}, {"eval_batches", CHANGE_HARMLESS}, {"keep_best", CHANGE_HARMLESS},
    {"early_stopping_patience", CHANGE_HARMLESS}, {"early_stopping_min_delta", CHANGE_HARMLESS},
    {"save_every", CHANGE_HARMLESS}, {"keep_checkpoints", CHANGE_HARMLESS}, {"save_format", CHANGE_HARMLESS},
    {"merge", CHANGE_HARMLESS}, {"sample_every", CHANGE_HARMLESS}, {"sample_tokens", CHANGE_HARMLESS},
    {"prompt", CHANGE_HARMLESS}, {"temperature", CHANGE_HARMLESS}, {"top_k", CHANGE_HARMLESS},
    {"vocab", CHANGE_HARMLESS}, {"threads", CHANGE_HARMLESS}, {"watchdog_timeout", CHANGE_HARMLESS},
    {"deterministic", CHANGE_HARMLESS}, {"zero", CHANGE_HARMLESS}, {"recompute", CHANGE_HARMLESS},
    {"dtype", CHANGE_HARMLESS}, {"profile", CHANGE_HARMLESS},
    {"zero3_keep", CHANGE_HARMLESS}, {"shard_group", CHANGE_HARMLESS}, {"offload_optimizer", CHANGE_HARMLESS},
    {"memory_budget", CHANGE_HARMLESS},
    {"out", CHANGE_INVOCATION}, {"resume", CHANGE_INVOCATION}, {"stop_after", CHANGE_INVOCATION},
};

static const char* refused_why(const char* key) {
    if (!strcmp(key, "model")) return WHY_MODEL;
    if (!strcmp(key, "train_data")) return WHY_DATA;
    if (!strcmp(key, "val_data")) return WHY_VAL;
    if (!strcmp(key, "seed") || !strcmp(key, "shuffle")) return WHY_ORDER;
    if (!strncmp(key, "lora_", 5) || !strcmp(key, "rslora") || !strcmp(key, "train_ln_f") || !strcmp(key, "adapter") ||
        !strcmp(key, "qlora")) return WHY_LORA;
    return WHY_BATCH;
}

static int is_path(const char* key) {
    return !strcmp(key, "model") || !strcmp(key, "train_data") || !strcmp(key, "val_data") || !strcmp(key, "adapter");
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
    const char** flags[] = {&f->model, &f->train_data, &f->val_data, &f->adapter, &f->sample.vocab};
    const char* names[] = {"--model", "--train-data", "--val-data", "--adapter", "--vocab"};
    GPT2Config scratch;
    for (int i = 0; i < 5; i++) {
        const char* v = *flags[i];
        if (!v || !runconfig_given(rc, names[i]) || (flags[i] == &f->model && gpt2_config_from_descriptor(&scratch, v) == 0)) continue;
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
    runconfig_parse_args(rc, argc, argv); // rc->given: exactly the command line's flags now
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

void runrecord_start(RunStart* st, RunConfig* rc, Comm* comm, int argc, char** argv, TrainMode mode) {
    memset(st, 0, sizeof(*st));
    runconfig_defaults(rc, mode);
    runconfig_parse_args(rc, argc, argv);
    const char* out = rc->f.out_dir;
    st->resume_step = -1;
    if (rc->f.resume && out && strcmp(out, "none")) { // (--resume without --out: runconfig_derive says it)
        st->resume_step = ckpt_find_latest(out);
        if (st->resume_step < 0 && !strcmp(rc->f.resume, "yes"))
            fatal("drop --resume to start a new run (--resume auto starts one when there is nothing to resume), or point --out at the run's directory",
                  "no complete checkpoint (DONE_* marker) in '%s'", out);
        if (st->resume_step < 0 && comm->rank == 0) printf("resume auto: no checkpoint in %s: starting a new run\n", out);
        if (st->resume_step >= 0) ckpt_verify(comm, out, st->resume_step); // every file against its manifest, before anything is read
    }
    if (st->resume_step >= 0 && runrecord_read(out, &st->rec)) {
        st->has_rec = 1;
        RunConfig cmd = *rc; // (rc is rebuilt from the record; cmd keeps the command line's strings)
        resume_config(rc, &st->rec, cmd.f.out_dir, mode, argc, argv, comm->world, &st->changes);
        runconfig_free(&cmd);
        return;
    }
    if (st->resume_step >= 0) {
        check_state_mode(out, st->resume_step, mode);
        if (comm->rank == 0) printf("note: no %s in %s (a run of an earlier version): the settings come from the command line\n", RUNRECORD_FILE, out);
    }
    if (!out && !rc->f.resume) default_out_dir(comm, rc);
    absolute_paths(rc);
    char err[1024];
    const char* hint = NULL;
    if (runconfig_derive(rc, comm->world, err, sizeof(err), &hint) != 0) fatal(hint, "%s", err);
}

void runrecord_start_free(RunStart* st) {
    if (st->has_rec) runconfig_free(&st->rec);
    memset(st, 0, sizeof(*st));
}
