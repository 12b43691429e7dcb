#define _GNU_SOURCE
#include "run/runlog.h"
#include "base/check.h"
#include "base/fileio.h"
#include "base/timer.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

// h:mm:ss (or m:ss under an hour) into out.
static void runlog_hms(double seconds, char* out, size_t cap) {
    if (!isfinite(seconds) || seconds < 0) seconds = 0;
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(out, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(out, cap, "%ld:%02ld", s / 60, s % 60);
}

// A failed write of log.jsonl stops the run (fatal: the checkpoints stay as they are).
static void log_failed(const RunLog* l) {
    const int e = errno;
    fatal("make room on the file system of --out (or check that it is writable), then continue with --resume",
          "cannot write '%s': %s: the run stops (its checkpoints are kept)", l->path, strerror(e));
}

// A failed write of the event file stops the run the same way.
static void tb_failed(const RunLog* l) {
    const int e = errno;
    fatal("make room on the file system of --tensorboard (or check that it is writable), then continue with --resume",
          "cannot write '%s': %s: the run stops (its checkpoints are kept)", l->tb.path, strerror(e));
}

static void log_line(RunLog* l, const char* fmt, ...) {
    if (!l->fp) return;
    va_list ap;
    va_start(ap, fmt);
    int bad = vfprintf(l->fp, fmt, ap) < 0;
    va_end(ap);
    bad |= fputc('\n', l->fp) == EOF;
    bad |= fflush(l->fp) != 0; // (each line reaches the file as it is logged: a full disk shows now)
    if (bad) log_failed(l);
}

// Whether the run evaluates at step (train_loop: at every --eval-every and at its last step).
static int runlog_evaluates(const RunLog* l, long step) {
    return l->has_val && step <= l->steps && ((l->eval_every > 0 && step % l->eval_every == 0) || step == l->steps);
}

// The step of a log line (-1: none, a line cut short or not the log's); *eval: it is an evaluation.
static long log_line_step(const char* line, size_t n, int* eval) {
    char head[64];
    long step = -1;
    snprintf(head, sizeof(head), "%.*s", (int)(n < 63 ? n : 63), line);
    if (n == 0 || line[n - 1] != '\n' || sscanf(head, "{\"step\": %ld", &step) != 1) return -1;
    *eval = memmem(line, n, "\"val_loss\"", 10) != NULL;
    return step;
}

// The length of the log's first part that belongs to the checkpoint of step S: every line up
// to the first one of a later step, or the evaluation at S when the run evaluates at S again.
static size_t log_keep(const RunLog* l, const char* text, size_t len, long S) {
    size_t pos = 0;
    while (pos < len) {
        const char* nl = memchr(text + pos, '\n', len - pos);
        const size_t end = nl ? (size_t)(nl - text) + 1 : len;
        int eval = 0;
        const long step = log_line_step(text + pos, end - pos, &eval);
        if (step < 0 || step > S || (step == S && eval && runlog_evaluates(l, S))) break;
        pos = end;
    }
    return pos;
}

// What the dropped part of the log held, and what of it the resumed run does again.
typedef struct {
    long steps, lo, hi;     // step lines, their first and last step
    long evals, elo, ehi;   // evaluations, their first and last step ...
    long evals_again;       // ... of which the run does again (runlog_evaluates)
    long cut;               // lines cut short (a crash), or not the log's
} LogDropped;

static void log_dropped(const RunLog* l, const char* text, size_t len, LogDropped* d) {
    memset(d, 0, sizeof(*d));
    for (size_t pos = 0; pos < len;) {
        const char* nl = memchr(text + pos, '\n', len - pos);
        const size_t end = nl ? (size_t)(nl - text) + 1 : len;
        int eval = 0;
        const long step = log_line_step(text + pos, end - pos, &eval);
        pos = end;
        if (step < 0) { d->cut++; continue; }
        long *n = eval ? &d->evals : &d->steps, *lo = eval ? &d->elo : &d->lo, *hi = eval ? &d->ehi : &d->hi;
        if ((*n)++ == 0 || step < *lo) *lo = step;
        if (step > *hi) *hi = step;
        if (eval && runlog_evaluates(l, step)) d->evals_again++;
    }
}

// "step 5", "steps 5-8" (n steps, every one from lo to hi); "the evaluation at step 4", "the
// evaluations at steps 4 and 8", "3 evaluations (steps 4 to 12)"
static void log_span(char* out, size_t cap, long n, long lo, long hi, int eval) {
    if (!eval) snprintf(out, cap, n == 1 ? "step %ld" : "steps %ld-%ld", lo, hi);
    else if (n == 1) snprintf(out, cap, "the evaluation at step %ld", lo);
    else if (n == 2) snprintf(out, cap, "the evaluations at steps %ld and %ld", lo, hi);
    else snprintf(out, cap, "%ld evaluations (steps %ld to %ld)", n, lo, hi);
}

// The resume's line: what was dropped, and what of it runs again (all of it, unless --steps or
// --eval-every changed with the resume).
static void log_say_dropped(const RunLog* l, size_t bytes, long S, const LogDropped* d) {
    char st[64] = "", ev[64] = "", again[200] = "";
    const long last = d->hi < l->steps ? d->hi : l->steps; // the last of the dropped steps the run takes again
    const int items = (d->steps > 0) + (d->evals > 0);
    if (d->steps) log_span(st, sizeof(st), d->steps, d->lo, d->hi, 0);
    if (d->evals) log_span(ev, sizeof(ev), d->evals, d->elo, d->ehi, 1);
    if (items && (!d->steps || last == d->hi) && d->evals_again == d->evals) {
        snprintf(again, sizeof(again), "; %s", items > 1 || d->steps > 1 || d->evals > 1 ? "they run again" : "it runs again");
    } else if (items) {
        char sa[64] = "", ea[64] = "";
        if (d->steps && last > S) log_span(sa, sizeof(sa), last - S, S + 1, last, 0);
        if (d->evals_again) snprintf(ea, sizeof(ea), "%ld of the evaluations", d->evals_again);
        snprintf(again, sizeof(again), "; %s%s%s%s again (this run's --steps %d, --eval-every %d)", sa, sa[0] && ea[0] ? " and " : "", ea,
                 sa[0] || ea[0] ? " run" : "none of it runs", l->steps, l->eval_every);
    }
    char cut[48] = "";
    if (d->cut) snprintf(cut, sizeof(cut), d->cut == 1 ? "an unreadable line" : "%ld unreadable lines", d->cut);
    printf("log.jsonl: %zu bytes logged after the checkpoint of step %ld dropped: %s%s%s%s%s%s\n", bytes, S, st,
           d->steps && d->evals ? (d->cut ? ", " : " and ") : "", ev, d->cut && items ? " and " : "", cut, again);
}

// The event file's length that belongs to the checkpoint of step S, as log_keep keeps log.jsonl:
// every event up to the first one of a later step, or the evaluation at S when the run evaluates
// at S again, or the first record cut short (a crash) or unreadable. *dropped: the events after.
static size_t tb_keep(const RunLog* l, const uint8_t* buf, size_t len, long S, int* dropped) {
    size_t pos = 0, keep = 0, n = 0;
    const uint8_t* d;
    int cut = 0;
    *dropped = 0;
    while (tfevents_next_record(buf, len, &pos, &d, &n) == 1) {
        TfEvent e;
        const int bad = tfevents_decode_event(d, n, &e) != 0;
        const int eval = !bad && e.nvalues > 0 && !strncmp(e.values[0].tag, "eval/", 5);
        if (!cut && (bad || (e.nvalues > 0 && (e.step > S || (e.step == S && eval && runlog_evaluates(l, S)))))) cut = 1;
        if (cut) (*dropped)++;
        else keep = pos;
    }
    return keep;
}

// --tensorboard: the run's event file in dir. A resumed run continues the newest file there, cut
// back to its checkpoint (so that TensorBoard shows no step twice); a new run starts a new file.
static void runlog_tb_open(RunLog* l, const char* dir, long S) {
    char path[LLMC_PATH_MAX];
    const int found = tfevents_find_latest(dir, path, sizeof(path));
    if (S >= 0 && found) {
        size_t len = 0;
        uint8_t* buf = (uint8_t*)read_file_all(path, &len);
        int dropped = 0;
        const size_t keep = tb_keep(l, buf, len, S, &dropped);
        if (keep < len) {
            atomic_write_file(path, buf, keep);
            printf("tensorboard: %zu bytes (%d events) logged after the checkpoint of step %ld dropped from %s\n", len - keep, dropped, S, path);
        }
        free(buf);
        tfevents_append(&l->tb, path, tfevents_now());
        printf("tensorboard: continuing %s\n", l->tb.path);
        return;
    }
    if (found)
        printf("warning: --tensorboard %s holds the event file of another run (%s): TensorBoard shows the files of a directory as one run; "
               "give each run its own directory\n", dir, path);
    tfevents_create(&l->tb, dir, tfevents_now());
    printf("tensorboard: events in %s\n", l->tb.path);
}

void runlog_open(RunLog* l, const char* dir, const char* tb_dir, int rank, long resume_step) {
    l->console = rank == 0;
    l->fp = NULL;
    l->tb.fp = NULL;
    l->t0 = timer_now_s();
    if (rank == 0 && tb_dir) runlog_tb_open(l, tb_dir, resume_step);
    if (rank != 0 || !dir) return;
    char* path = l->path;
    path_join(path, sizeof(l->path), dir, "log.jsonl");
    if (resume_step >= 0 && file_exists(path)) {
        size_t len = 0;
        char* text = read_file_all(path, &len);
        size_t keep = log_keep(l, text, len, resume_step);
        if (keep < len) {
            LogDropped d;
            log_dropped(l, text + keep, len - keep, &d);
            atomic_write_file(path, text, keep);
            log_say_dropped(l, len - keep, resume_step, &d);
        }
        free(text);
    }
    l->fp = fopen(path, resume_step >= 0 ? "ab" : "wb");
    if (!l->fp) fatal("check that --out is writable", "cannot open '%s' for writing", path);
}

// One line of log.jsonl being built, and the same numbers as an event of scalars (--tensorboard).
typedef struct {
    char json[2048];
    size_t n;
    TfEvent ev;
} LogLine;

// The TensorBoard tag of a log.jsonl member, named as HF Trainer's TensorBoard callback names its
// logs: "val_X" -> "eval/X", anything else "train/X", with HF's names for loss, lr and throughput.
// 0 when it does not fit in out.
static int runlog_tag(const char* key, char* out, size_t cap) {
    static const char* const hf[][2] = {{"train_loss", "loss"}, {"lr", "learning_rate"}, {"tok_per_s", "tokens_per_second"}};
    if (!strncmp(key, "val_", 4)) return snprintf(out, cap, "eval/%s", key + 4) < (int)cap;
    for (size_t i = 0; i < sizeof(hf) / sizeof(hf[0]); i++)
        if (!strcmp(key, hf[i][0])) key = hf[i][1];
    return snprintf(out, cap, "train/%s", key) < (int)cap;
}

static void line_start(LogLine* o, long step) {
    o->n = (size_t)snprintf(o->json, sizeof(o->json), "{\"step\": %ld", step);
    memset(&o->ev, 0, sizeof(o->ev));
    o->ev.step = step;
}

// Text as it is (", \"skipped\": true").
static void line_text(LogLine* o, const char* text) {
    if (o->n < sizeof(o->json)) o->n += (size_t)snprintf(o->json + o->n, sizeof(o->json) - o->n, "%s", text);
}

// The member key: v printed with fmt, null when not finite (JSON has no NaN or infinity); its
// scalar in the event is the number as printed, in float, and a number that is null here (or not
// finite in float) has no scalar.
static void line_num(LogLine* o, const char* key, const char* fmt, double v) {
    char a[64], m[160];
    if (isfinite(v)) snprintf(a, sizeof(a), fmt, v);
    else snprintf(a, sizeof(a), "null");
    snprintf(m, sizeof(m), ", \"%s\": %s", key, a);
    line_text(o, m);
    const float f = isfinite(v) ? (float)strtod(a, NULL) : NAN;
    TfValue* t = &o->ev.values[o->ev.nvalues];
    if (isfinite(f) && o->ev.nvalues < TFEVENTS_MAX_VALUES && runlog_tag(key, t->tag, sizeof(t->tag))) {
        t->value = f;
        o->ev.nvalues++;
    }
}

// The line to log.jsonl and its event to the event file.
static void line_end(RunLog* l, LogLine* o) {
    log_line(l, "%s}", o->json);
    if (!l->tb.fp) return;
    o->ev.wall_time = tfevents_now();
    if (tfevents_write(&l->tb, &o->ev)) tb_failed(l);
}

// TRL's metrics of a preference objective as members ("<prefix>rewards/chosen": ...), ORPO's
// three more with it.
static void pref_members(LogLine* out, const char* prefix, PrefObjective o, const PrefMeans* m) {
    const char* names[] = {"rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected",
                           "nll_loss", "log_odds_ratio", "log_odds_chosen"};
    const double v[] = {m->rewards_c, m->rewards_r, m->accuracies, m->margins, m->logps_c, m->logps_r, m->nll_loss, m->log_odds_ratio,
                        m->log_odds_chosen};
    for (int i = 0; i < (o == PREF_ORPO ? 9 : 6); i++) {
        char key[64];
        snprintf(key, sizeof(key), "%s%s", prefix, names[i]);
        line_num(out, key, "%.9g", v[i]);
    }
}

void runlog_step(RunLog* l, long step, const StepResult* s, double seconds) {
    const double ms = seconds * 1000.0, tps = (double)l->tokens_per_step / seconds, tflops = l->step_flops / seconds / 1e12;
    // the console's rate: TFLOP/s and MFU on a device with a known peak; GFLOP/s where a CPU's
    // rate would read 0.0 TFLOP/s, and no MFU where the peak is unknown (null in log.jsonl)
    char rate[64];
    const double mfu = l->peak_flops > 0 ? tflops * 1e12 / l->peak_flops : NAN;
    if (l->peak_flops > 0) snprintf(rate, sizeof(rate), "%.1f TFLOP/s | MFU %.1f%%", tflops, 100.0 * mfu);
    else if (tflops >= 1.0) snprintf(rate, sizeof(rate), "%.1f TFLOP/s", tflops);
    else snprintf(rate, sizeof(rate), "%.1f GFLOP/s", tflops * 1e3);
    const double epoch = l->steps_per_epoch > 0 ? (double)step / l->steps_per_epoch : 0.0;
    const double elapsed = timer_now_s() - l->t0;
    const double eta = step > l->step0 ? elapsed / (double)(step - l->step0) * (double)(l->steps - step) : 0.0;
    char te[32], tr[32], pc[160] = "";
    if (s->loss_scale > 0) // --dtype fp16: the scale and the skipped steps, on the line (and in log.jsonl)
        snprintf(pc, sizeof(pc), " | scale %g%s (%ld skipped)", s->loss_scale, s->overflow ? ", overflow" : "", s->skipped_total);
    if (s->pref) { // (the step line's short form, at its end where no parser of the fields before it looks:
                   // accuracy and margin; log.jsonl has every metric)
        const size_t c = strlen(pc);
        snprintf(pc + c, sizeof(pc) - c, " | acc %.2f | margin %.4f", s->pref->accuracies, s->pref->margins);
    }
    runlog_hms(elapsed, te, sizeof(te));
    runlog_hms(eta, tr, sizeof(tr));
    if (l->console) {
        if (s->no_targets)
            printf("step %4ld/%d | no targets: every token of the batch is masked, no update | lr %.3e | %.1f ms | epoch %.2f | %s elapsed, ETA %s\n",
                   step, l->steps, s->lr, ms, epoch, te, tr);
        else
            printf("step %4ld/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | %s | epoch %.2f | %s elapsed, ETA %s%s\n",
                   step, l->steps, s->loss, s->lr, s->norm, ms, tps, rate, epoch, te, tr, pc);
        fflush(stdout);
    }
    LogLine o;
    line_start(&o, step);
    if (s->no_targets) {
        line_text(&o, ", \"no_targets\": true");
        line_num(&o, "lr", "%.9g", s->lr);
        line_num(&o, "epoch", "%.6g", epoch);
        line_num(&o, "ms", "%.3f", ms);
        line_num(&o, "tok_per_s", "%.1f", tps);
        line_num(&o, "elapsed_s", "%.3f", elapsed);
        line_end(l, &o);
        return;
    }
    line_num(&o, "train_loss", "%.9g", s->loss);
    line_num(&o, "lr", "%.9g", s->lr);
    line_num(&o, "grad_norm", "%.9g", s->norm);
    line_num(&o, "epoch", "%.6g", epoch);
    line_num(&o, "ms", "%.3f", ms);
    line_num(&o, "tok_per_s", "%.1f", tps);
    line_num(&o, "tflops", "%.3f", tflops);
    line_num(&o, "mfu", "%.4f", mfu);
    line_num(&o, "elapsed_s", "%.3f", elapsed);
    if (s->loss_scale > 0) {
        line_num(&o, "loss_scale", "%.9g", s->loss_scale);
        line_num(&o, "skipped_steps", "%.0f", (double)s->skipped_total);
    }
    if (s->pref) pref_members(&o, "", l->objective, s->pref);
    if (s->skipped) line_text(&o, ", \"skipped\": true");
    line_end(l, &o);
}

void runlog_eval(RunLog* l, long step, double val_loss, const PrefMeans* pref) {
    LogLine o;
    line_start(&o, step);
    line_num(&o, "val_loss", "%.9g", val_loss);
    if (pref) {
        if (l->console) {
            printf("step %ld | val loss %.6f | rewards/accuracies %.4f | rewards/margins %.4f | rewards chosen %.4f, rejected %.4f\n", step, val_loss,
                   pref->accuracies, pref->margins, pref->rewards_c, pref->rewards_r);
            fflush(stdout);
        }
        pref_members(&o, "val_", l->objective, pref);
    } else {
        if (l->console) {
            printf("step %ld | val loss %.6f | perplexity %.4g\n", step, val_loss, exp(val_loss));
            fflush(stdout);
        }
        line_num(&o, "val_ppl", "%.9g", exp(val_loss));
    }
    line_end(l, &o);
}

void runlog_summary(const RunLog* l, const RunSummary* s) {
    if (!l->console) return;
    char t[32];
    runlog_hms(timer_now_s() - l->t0, t, sizeof(t));
    printf("\nsummary: %s at step %ld of %d | %lld tokens seen (%.2f epochs) | this invocation: %ld steps in %s\n", s->ending, s->step,
           l->steps, (long long)(s->step * l->tokens_per_step), l->steps_per_epoch > 0 ? (double)s->step / l->steps_per_epoch : 0.0,
           s->step - l->step0, t);
    if (s->has_val && l->objective != PREF_SFT)
        printf("summary: val loss (%s) %.6f at step %ld | best %.6f at step %ld\n", pref_objective_name(l->objective), s->final_val,
               s->final_val_step, s->best_val, s->best_step);
    else if (s->has_val)
        printf("summary: val loss %.6f (perplexity %.4g) at step %ld | best %.6f (perplexity %.4g) at step %ld\n", s->final_val, exp(s->final_val),
               s->final_val_step, s->best_val, exp(s->best_val), s->best_step);
    if (!s->out_dir) printf("summary: --out none: nothing was written\n");
    else printf("summary: outputs in %s/ (log.jsonl, run_config.json, checkpoints%s)%s%s%s\n", s->out_dir, s->final_written ? ", final model" : "",
           s->best_dir ? " | best model: " : "", s->best_dir ? s->best_dir : "", s->best_dir ? "/" : "");
    fflush(stdout);
}

void runlog_close(RunLog* l) {
    FILE* fp = l->fp;
    l->fp = NULL;
    if (fp && fclose(fp) != 0) log_failed(l);
    if (tfevents_close(&l->tb) != 0) tb_failed(l);
}
