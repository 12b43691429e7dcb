// The preference objectives (llmc/model/prefloss.h) against TRL's loss code given the same
// sequence log-probabilities (test/ref/pref/loss.safetensors, dev/gen_pref_ref.py loss): for
// every setting of DPO (robust, and TRL's sigmoid loss at label smoothing 0), IPO, ORPO and
// SimPO, each pair's loss term, the derivative of the term w.r.t. the log-probability of a
// chosen / rejected target token (autograd through TRL), and TRL's logged means (loss, rewards,
// accuracies, margins, logps, ORPO's log odds) over all pairs at once. Pairs of 1 to 40 tokens,
// sums from -0.002 to -300, margins that saturate the sigmoid both ways, an identical pair.
// Tolerance: 1e-5 relative (+ 1e-10 absolute): TRL runs ORPO in fp32, the rest in double here.
// Also: names, defaults and the range checks (a bad setting ends in a message naming the flag).
#include "test.h"
#include "test_child.h"
#include "../llmc/base/safetensors.h"
#include "../llmc/base/json.h"
#include "../llmc/base/check.h"
#include "../llmc/model/prefloss.h"

#define REF "test/ref/pref/loss.safetensors"
#define RTOL 1e-5
#define ATOL 1e-10

static double* read_f64(StFile* f, const char* name, size_t* n) {
    const StTensor* t = st_find(f, name);
    if (!t || t->dtype != ST_F64) { fprintf(stderr, "%s: F64 tensor %s missing\n", f->path, name); exit(1); }
    double* v = (double*)mallocCheck(t->numel * sizeof(double));
    st_read_raw(f, t, v);
    if (n) *n = t->numel;
    return v;
}

static int close_enough(double a, double b) { return fabs(a - b) <= ATOL + RTOL * fabs(b); }

static void check_values(const char* what, const double* got, const double* want, size_t n) {
    size_t bad = 0, worst = 0;
    double wd = -1, maxd = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs(got[i] - want[i]);
        if (d > maxd) maxd = d;
        if (!close_enough(got[i], want[i])) { bad++; if (d > wd) { wd = d; worst = i; } }
    }
    TEST_CHECK(bad == 0, "%s: %zu of %zu out of tolerance; worst [%zu]: %.12g, TRL %.12g", what, bad, n, worst, got[worst], want[worst]);
    if (!bad) printf("ok   %s (%zu values, max abs diff %.3g)\n", what, n, maxd);
}

// One setting: its config from the metadata entry [name, kind, {settings}].
static void setting_config(const JsonValue* e, PrefConfig* c, const char** name) {
    *name = json_as_string(json_at(e, 0));
    const int o = pref_objective_parse(json_as_string(json_at(e, 1)));
    TEST_CHECK(o > 0, "objective %s", json_as_string(json_at(e, 1)));
    pref_config_default(c, (PrefObjective)o);
    const JsonValue* s = json_at(e, 2);
    double v;
    if (json_get(s, "beta") && json_as_number(json_get(s, "beta"), &v)) c->beta = v;
    if (json_get(s, "label_smoothing") && json_as_number(json_get(s, "label_smoothing"), &v)) c->label_smoothing = v;
    if (json_get(s, "orpo_lambda") && json_as_number(json_get(s, "orpo_lambda"), &v)) c->orpo_lambda = v;
    if (json_get(s, "simpo_gamma") && json_as_number(json_get(s, "simpo_gamma"), &v)) c->simpo_gamma = v;
    pref_config_check(c);
}

static void check_setting(StFile* f, const JsonValue* e, const PrefSeqs* seqs, int P) {
    PrefConfig c;
    const char* name;
    setting_config(e, &c, &name);
    double loss[64], gc[64], gr[64], means[10];
    PrefMetrics m;
    memset(&m, 0, sizeof(m));
    for (int i = 0; i < P; i++) {
        PrefPairOut o;
        pref_pair(&c, &seqs[i], &o);
        loss[i] = o.loss; gc[i] = o.gc; gr[i] = o.gr;
        pref_metrics_add(&m, &o);
    }
    PrefMeans mm;
    pref_metrics_mean(&c, &m, &mm);
    const double got_means[10] = { mm.loss, mm.rewards_c, mm.rewards_r, mm.accuracies, mm.margins, mm.logps_c, mm.logps_r,
                                   mm.nll_loss, mm.log_odds_ratio, mm.log_odds_chosen };
    memcpy(means, got_means, sizeof(means));
    const char* parts[4] = { "loss", "gc", "gr", "metrics" };
    double* got[4] = { loss, gc, gr, means };
    for (int k = 0; k < 4; k++) {
        char key[128], what[200];
        snprintf(key, sizeof(key), "%s.%s", name, parts[k]);
        size_t n;
        double* want = read_f64(f, key, &n);
        TEST_CHECK(n == (k == 3 ? 10u : (size_t)P), "%s size", key);
        snprintf(what, sizeof(what), "%s (%s beta %g ls %g lambda %g gamma %g): %s", name, pref_objective_name(c.objective), c.beta,
                 c.label_smoothing, c.orpo_lambda, c.simpo_gamma,
                 k == 0 ? "each pair's loss" : k == 1 ? "d term / d log p (chosen token)" : k == 2 ? "d term / d log p (rejected token)"
                                                                                               : "TRL's logged means");
        check_values(what, got[k], want, n);
        free(want);
    }
}

// The derivatives by central differences of the pair terms, independently of TRL: catches a
// derivative that agrees with TRL's autograd for the wrong reason (e.g. both zero).
static void check_finite_differences(const PrefSeqs* seqs, int P) {
    for (int o = PREF_DPO; o < PREF_N_OBJECTIVES; o++) {
        PrefConfig c;
        pref_config_default(&c, (PrefObjective)o);
        c.label_smoothing = o == PREF_DPO || o == PREF_SIMPO ? 0.1 : 0.0;
        double worst = 0;
        for (int i = 0; i < P; i++) {
            PrefPairOut base, hi, lo;
            pref_pair(&c, &seqs[i], &base);
            for (int side = 0; side < 2; side++) {
                PrefSeqs s = seqs[i];
                const int n = side ? s.n_r : s.n_c;
                const double h = 1e-6 * n; // a change h of the sum: d/d(one token) = d/dS
                double* x = side ? &s.logp_r : &s.logp_c;
                const double x0 = *x;
                *x = x0 + h; pref_pair(&c, &s, &hi);
                *x = x0 - h; pref_pair(&c, &s, &lo);
                const double fd = (hi.loss - lo.loss) / (2 * h), an = side ? base.gr : base.gc;
                const double err = fabs(fd - an) / (fabs(an) + 1e-6);
                if (err > worst) worst = err;
            }
        }
        TEST_CHECK(worst < 1e-4, "%s: analytic vs finite-difference derivatives differ by %.3g (relative)", pref_objective_name(c.objective), worst);
        printf("ok   %s: derivatives = central differences (worst %.2g relative)\n", pref_objective_name(c.objective), worst);
    }
}

static void run_check(void* c) { pref_config_check((const PrefConfig*)c); }

static void bad_config(PrefObjective o, double beta, double ls, double lam, const char* expect) {
    PrefConfig c;
    pref_config_default(&c, o);
    c.beta = beta; c.label_smoothing = ls; c.orpo_lambda = lam;
    char out[2048];
    const int st = test_run_child(run_check, &c, out, sizeof(out));
    TEST_CHECK(st != 0 && strstr(out, expect), "config %s beta %g ls %g lambda %g: want a failure naming '%s', got status %d: %s",
               pref_objective_name(o), beta, ls, lam, expect, st, out);
}

int main(void) {
    StFile f;
    st_open(&f, REF);
    size_t P;
    double* col[6];
    const char* names[6] = { "logp_c", "logp_r", "n_c", "n_r", "ref_c", "ref_r" };
    for (int k = 0; k < 6; k++) col[k] = read_f64(&f, names[k], &P);
    PrefSeqs seqs[64];
    TEST_CHECK(P > 0 && P <= 64, "pairs: %zu", P);
    for (size_t i = 0; i < P; i++) {
        seqs[i].logp_c = col[0][i]; seqs[i].logp_r = col[1][i];
        seqs[i].n_c = (int)col[2][i]; seqs[i].n_r = (int)col[3][i];
        seqs[i].ref_c = col[4][i]; seqs[i].ref_r = col[5][i];
    }
    const char* meta = st_meta(&f, "settings");
    char err[256];
    JsonValue* settings = meta ? json_parse(meta, strlen(meta), err, sizeof(err)) : NULL;
    TEST_CHECK(settings && settings->type == JSON_ARRAY && settings->n > 0, "settings metadata");
    int kinds = 0;
    for (int i = 0; settings && i < settings->n; i++) {
        check_setting(&f, json_at(settings, i), seqs, (int)P);
        kinds |= 1 << pref_objective_parse(json_as_string(json_at(json_at(settings, i), 1)));
    }
    TEST_CHECK(kinds == ((1 << PREF_DPO) | (1 << PREF_IPO) | (1 << PREF_ORPO) | (1 << PREF_SIMPO)), "every objective has a reference");
    check_finite_differences(seqs, (int)P);

    TEST_CHECK(pref_objective_parse("dpo") == PREF_DPO && pref_objective_parse("simpo") == PREF_SIMPO &&
               pref_objective_parse("sft") == PREF_SFT && pref_objective_parse("kto") == -1, "objective names");
    TEST_CHECK(pref_uses_reference(PREF_DPO) && pref_uses_reference(PREF_IPO) && !pref_uses_reference(PREF_ORPO) &&
               !pref_uses_reference(PREF_SIMPO) && pref_uses_nll(PREF_ORPO) && !pref_uses_nll(PREF_SIMPO), "which objectives need what");
    PrefConfig d;
    pref_config_default(&d, PREF_SIMPO);
    TEST_CHECK(d.beta == 0.1 && d.simpo_gamma == 0.5 && d.orpo_lambda == 0.1 && d.label_smoothing == 0.0, "TRL's defaults");
    bad_config(PREF_DPO, 0.0, 0.0, 0.1, "--beta");
    bad_config(PREF_DPO, 0.1, 0.5, 0.1, "--label-smoothing");
    bad_config(PREF_IPO, 0.1, 0.1, 0.1, "--label-smoothing 0.1 is for --objective dpo (robust DPO) and simpo, not ipo");
    bad_config(PREF_ORPO, 0.1, 0.0, -1.0, "--orpo-lambda");

    json_free(settings);
    for (int k = 0; k < 6; k++) free(col[k]);
    st_close(&f);
    return test_finish("test_prefloss");
}
