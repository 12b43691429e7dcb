#include "model/prefloss.h"
#include "base/check.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

const char* const PREF_NAMES[PREF_N_OBJECTIVES + 1] = { "sft", "dpo", "ipo", "orpo", "simpo", NULL };

int pref_objective_parse(const char* name) {
    for (int i = 0; i < PREF_N_OBJECTIVES; i++) if (name && strcmp(name, PREF_NAMES[i]) == 0) return i;
    return -1;
}

const char* pref_objective_name(PrefObjective o) { return (unsigned)o < PREF_N_OBJECTIVES ? PREF_NAMES[o] : "?"; }

void pref_config_default(PrefConfig* c, PrefObjective o) {
    c->objective = o;
    c->beta = 0.1;
    c->label_smoothing = 0.0;
    c->orpo_lambda = 0.1;
    c->simpo_gamma = 0.5;
}

int pref_uses_reference(PrefObjective o) { return o == PREF_DPO || o == PREF_IPO; }
int pref_uses_nll(PrefObjective o) { return o == PREF_ORPO; }

int pref_config_error(const PrefConfig* c, char* err, size_t cap) {
    const char* name = pref_objective_name(c->objective);
    if ((unsigned)c->objective >= PREF_N_OBJECTIVES) snprintf(err, cap, "preference objective %d (a bug in llmc)", (int)c->objective);
    else if (!(c->beta > 0.0) || !isfinite(c->beta)) snprintf(err, cap, "--beta %g: beta must be above 0 (TRL's default: 0.1)", c->beta);
    else if (!(c->orpo_lambda > 0.0) || !isfinite(c->orpo_lambda))
        snprintf(err, cap, "--orpo-lambda %g: lambda must be above 0 (TRL's default: 0.1)", c->orpo_lambda);
    else if (!isfinite(c->simpo_gamma)) snprintf(err, cap, "--simpo-gamma %g is not a finite number (TRL's default: 0.5)", c->simpo_gamma);
    else if (!(c->label_smoothing >= 0.0 && c->label_smoothing < 0.5))
        snprintf(err, cap, "--label-smoothing %g is out of [0, 0.5): the probability that a pair's preference is flipped", c->label_smoothing);
    else if (c->label_smoothing > 0.0 && c->objective != PREF_DPO && c->objective != PREF_SIMPO)
        snprintf(err, cap, "--label-smoothing %g is for --objective dpo (robust DPO) and simpo, not %s", c->label_smoothing, name);
    else return 0;
    return -1;
}

void pref_config_check(const PrefConfig* c) {
    char err[256];
    if (pref_config_error(c, err, sizeof(err))) fatal("see docs/PREFERENCE.md: which settings each objective takes", "%s", err);
}

// log sigmoid(x) = -log(1 + e^-x), without overflow either way
static double log_sigmoid(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }
static double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
// log(1 - e^x) for x < 0, as TRL's log1mexp branches (at -ln 2) to stay accurate
static double log1mexp(double x) { return x < -0.6931471805599453 ? log1p(-exp(x)) : log(-expm1(x)); }

// dpo: TRL's robust loss (its sigmoid loss at e = 0) on z = beta * delta; d loss / dz in *dz
static double dpo_term(double z, double e, double* dz) {
    *dz = (-(1.0 - e) * sigmoid(-z) - e * sigmoid(z)) / (1.0 - 2.0 * e);
    return (-(1.0 - e) * log_sigmoid(z) + e * log_sigmoid(-z)) / (1.0 - 2.0 * e);
}

// simpo: the conservative form (CPOTrainer) on z; d loss / dz in *dz
static double simpo_term(double z, double e, double* dz) {
    *dz = -(1.0 - e) * sigmoid(-z) + e * sigmoid(z);
    return -(1.0 - e) * log_sigmoid(z) - e * log_sigmoid(-z);
}

static void pref_pair_ref(const PrefConfig* c, const PrefSeqs* s, PrefPairOut* o) {
    const double lc = s->logp_c - s->ref_c, lr = s->logp_r - s->ref_r, b = c->beta;
    o->reward_c = b * lc; o->reward_r = b * lr;
    o->logps_c = s->logp_c; o->logps_r = s->logp_r;
    if (c->objective == PREF_DPO) {
        double dz;
        o->loss = dpo_term(b * (lc - lr), c->label_smoothing, &dz);
        o->gc = dz * b; o->gr = -dz * b;
        return;
    }
    const double h = lc / s->n_c - lr / s->n_r, d = h - 1.0 / (2.0 * b);
    o->loss = d * d;
    o->gc = 2.0 * d / s->n_c; o->gr = -2.0 * d / s->n_r;
}

void pref_pair(const PrefConfig* c, const PrefSeqs* s, PrefPairOut* o) {
    memset(o, 0, sizeof(*o));
    if (s->n_c < 1 || s->n_r < 1) fatal("this is a bug in llmc", "a preference pair with %d chosen and %d rejected targets", s->n_c, s->n_r);
    if (pref_uses_reference(c->objective)) { pref_pair_ref(c, s, o); return; }
    const double ac = s->logp_c / s->n_c, ar = s->logp_r / s->n_r;
    o->logps_c = ac; o->logps_r = ar;
    if (c->objective == PREF_SIMPO) {
        double dz;
        o->loss = simpo_term(c->beta * (ac - ar) - c->simpo_gamma, c->label_smoothing, &dz);
        o->gc = dz * c->beta / s->n_c; o->gr = -dz * c->beta / s->n_r;
        o->reward_c = c->beta * ac; o->reward_r = c->beta * ar;
        return;
    }
    if (c->objective != PREF_ORPO) fatal("this is a bug in llmc", "pref_pair with objective %s", pref_objective_name(c->objective));
    const double lam = c->orpo_lambda;
    o->log_odds = (ac - ar) - (log1mexp(ac) - log1mexp(ar));
    o->loss = -lam * log_sigmoid(o->log_odds);
    const double dodds = -lam * sigmoid(-o->log_odds); // d term / d o
    // d o / d a_c = 1 / (1 - e^a_c), d o / d a_r = -1 / (1 - e^a_r)
    o->gc = dodds / -expm1(ac) / s->n_c;
    o->gr = -dodds / -expm1(ar) / s->n_r;
    o->reward_c = lam * ac; o->reward_r = lam * ar;
}

void pref_metrics_add(PrefMetrics* m, const PrefPairOut* o) {
    m->pairs += 1.0;
    m->loss += o->loss;
    m->rewards_c += o->reward_c; m->rewards_r += o->reward_r;
    m->accuracies += o->reward_c > o->reward_r;
    m->margins += o->reward_c - o->reward_r;
    m->logps_c += o->logps_c; m->logps_r += o->logps_r;
    m->log_odds_ratio += log_sigmoid(o->log_odds);
    m->log_odds_chosen += o->log_odds;
}

void pref_metrics_mean(const PrefConfig* c, const PrefMetrics* m, PrefMeans* out) {
    memset(out, 0, sizeof(*out));
    if (m->pairs <= 0) return;
    const double p = m->pairs;
    out->nll_loss = m->nll_tokens > 0 ? m->nll_sum / m->nll_tokens : 0.0;
    out->loss = m->loss / p + (pref_uses_nll(c->objective) ? out->nll_loss : 0.0);
    out->rewards_c = m->rewards_c / p; out->rewards_r = m->rewards_r / p;
    out->accuracies = m->accuracies / p; out->margins = m->margins / p;
    out->logps_c = m->logps_c / p; out->logps_r = m->logps_r / p;
    if (c->objective == PREF_ORPO) { out->log_odds_ratio = m->log_odds_ratio / p; out->log_odds_chosen = m->log_odds_chosen / p; }
}
