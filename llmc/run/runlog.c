#define _GNU_SOURCE
#include "run/runlog.h"
#include "base/check.h"
#include "base/fileio.h"
#include "base/timer.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

// h:mm:ss (or m:ss under an hour) into out.
static void runlog_hms(double seconds, char* out, size_t cap) {
    if (!isfinite(seconds) || seconds < 0) seconds = 0;
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(out, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(out, cap, "%ld:%02ld", s / 60, s % 60);
}

// A number for log.jsonl: JSON has no NaN or infinity, so those are null.
static const char* num(char* buf, size_t cap, double v) {
    if (isfinite(v)) snprintf(buf, cap, "%.9g", v);
    else snprintf(buf, cap, "null");
    return buf;
}

// A failed write of log.jsonl stops the run (fatal: the checkpoints stay as they are).
static void log_failed(const RunLog* l) {
    const int e = errno;
    fatal("make room on the file system of --out (or check that it is writable), then continue with --resume",
          "cannot write '%s': %s: the run stops (its checkpoints are kept)", l->path, strerror(e));
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

void runlog_open(RunLog* l, const char* dir, int rank, long resume_step) {
    l->console = rank == 0;
    l->fp = NULL;
    l->t0 = timer_now_s();
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

// TRL's metrics of a preference objective as JSON members (", \"<prefix>rewards/chosen\": ..."),
// ORPO's three more with it.
static void pref_json(char* out, size_t cap, const char* prefix, PrefObjective o, const PrefMeans* m) {
    const char* names[] = {"rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected",
                           "nll_loss", "log_odds_ratio", "log_odds_chosen"};
    const double v[] = {m->rewards_c, m->rewards_r, m->accuracies, m->margins, m->logps_c, m->logps_r, m->nll_loss, m->log_odds_ratio,
                        m->log_odds_chosen};
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < (o == PREF_ORPO ? 9 : 6) && k < cap; i++) {
        char a[32];
        k += (size_t)snprintf(out + k, cap - k, ", \"%s%s\": %s", prefix, names[i], num(a, sizeof(a), v[i]));
    }
}

void runlog_step(RunLog* l, long step, const StepResult* s, double seconds) {
    const double ms = seconds * 1000.0, tps = (double)l->tokens_per_step / seconds, tflops = l->step_flops / seconds / 1e12;
    // the console's rate: TFLOP/s and MFU on a device with a known peak; GFLOP/s where a CPU's
    // rate would read 0.0 TFLOP/s, and no MFU where the peak is unknown
    char rate[64], mfu_json[32] = "null";
    if (l->peak_flops > 0) {
        snprintf(rate, sizeof(rate), "%.1f TFLOP/s | MFU %.1f%%", tflops, 100.0 * tflops * 1e12 / l->peak_flops);
        snprintf(mfu_json, sizeof(mfu_json), "%.4f", tflops * 1e12 / l->peak_flops);
    } else if (tflops >= 1.0) {
        snprintf(rate, sizeof(rate), "%.1f TFLOP/s", tflops);
    } else {
        snprintf(rate, sizeof(rate), "%.1f GFLOP/s", tflops * 1e3);
    }
    const double epoch = l->steps_per_epoch > 0 ? (double)step / l->steps_per_epoch : 0.0;
    const double elapsed = timer_now_s() - l->t0;
    const double eta = step > l->step0 ? elapsed / (double)(step - l->step0) * (double)(l->steps - step) : 0.0;
    char te[32], tr[32], a[32], b[32], pc[160] = "", pj[720] = "";
    if (s->loss_scale > 0) { // --dtype fp16: the scale and the skipped steps, on the line and in log.jsonl
        snprintf(pc, sizeof(pc), " | scale %g%s (%ld skipped)", s->loss_scale, s->overflow ? ", overflow" : "", s->skipped_total);
        snprintf(pj, sizeof(pj), ", \"loss_scale\": %.9g, \"skipped_steps\": %ld", s->loss_scale, s->skipped_total);
    }
    if (s->pref) { // (the step line's short form, at its end where no parser of the fields before it looks:
                   // accuracy and margin; log.jsonl has every metric)
        const size_t c = strlen(pc), j = strlen(pj);
        snprintf(pc + c, sizeof(pc) - c, " | acc %.2f | margin %.4f", s->pref->accuracies, s->pref->margins);
        pref_json(pj + j, sizeof(pj) - j, "", l->objective, s->pref);
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
    if (s->no_targets)
        log_line(l, "{\"step\": %ld, \"no_targets\": true, \"lr\": %.9g, \"epoch\": %.6g, \"ms\": %.3f, \"tok_per_s\": %.1f, \"elapsed_s\": %.3f}",
                 step, s->lr, epoch, ms, tps, elapsed);
    else
        log_line(l, "{\"step\": %ld, \"train_loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, \"epoch\": %.6g, \"ms\": %.3f, \"tok_per_s\": %.1f, "
                    "\"tflops\": %.3f, \"mfu\": %s, \"elapsed_s\": %.3f%s%s}", step, num(a, sizeof(a), s->loss), s->lr, num(b, sizeof(b), s->norm),
                 epoch, ms, tps, tflops, mfu_json, elapsed, pj, s->skipped ? ", \"skipped\": true" : "");
}

void runlog_eval(RunLog* l, long step, double val_loss, const PrefMeans* pref) {
    char a[32], b[32];
    if (pref) {
        char extra[640];
        if (l->console) {
            printf("step %ld | val loss %.6f | rewards/accuracies %.4f | rewards/margins %.4f | rewards chosen %.4f, rejected %.4f\n", step, val_loss,
                   pref->accuracies, pref->margins, pref->rewards_c, pref->rewards_r);
            fflush(stdout);
        }
        pref_json(extra, sizeof(extra), "val_", l->objective, pref);
        log_line(l, "{\"step\": %ld, \"val_loss\": %s%s}", step, num(a, sizeof(a), val_loss), extra);
        return;
    }
    if (l->console) {
        printf("step %ld | val loss %.6f | perplexity %.4g\n", step, val_loss, exp(val_loss));
        fflush(stdout);
    }
    log_line(l, "{\"step\": %ld, \"val_loss\": %s, \"val_ppl\": %s}", step, num(a, sizeof(a), val_loss), num(b, sizeof(b), exp(val_loss)));
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
}
