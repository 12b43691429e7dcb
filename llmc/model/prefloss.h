// Preference objectives: DPO, IPO, ORPO and SimPO on the log-probabilities of preference pairs,
// the loss beside the cross-entropy of supervised fine-tuning. Host arithmetic in double, as TRL
// 1.16 defines each (trl/trainer/dpo_trainer.py, experimental/orpo, experimental/cpo):
//
// A pair is a prompt x with a chosen completion y_c and a rejected one y_r. S_c = log p(y_c | x)
// is the sum of the log-probabilities of the chosen completion's targets (its tokens and the
// stop after them), n_c their number; a_c = S_c / n_c the average; the same for y_r. R_c, R_r:
// the sums under the reference model (DPO, IPO).
//   dpo    z = beta ((S_c - R_c) - (S_r - R_r)),
//          loss = (-(1 - e) log sig(z) + e log sig(-z)) / (1 - 2e), e = label smoothing: TRL's
//          "robust" DPO (Ray Chowdhury et al.), which is its default "sigmoid" loss at e = 0
//   ipo    h = (S_c - R_c) / n_c - (S_r - R_r) / n_r, loss = (h - 1 / (2 beta))^2 (TRL averages
//          the log-ratios over the completion, as the IPO authors did)
//   orpo   o = (a_c - a_r) - (log(1 - e^a_c) - log(1 - e^a_r)), pair term -lambda log sig(o);
//          plus the NLL of the chosen sequences, prompt included (TRL's ORPOTrainer: the mean
//          cross-entropy over every target of the batch's chosen records)
//   simpo  z = beta (a_c - a_r) - gamma, loss = -(1 - e) log sig(z) - e log sig(-z) (TRL's
//          CPOTrainer with loss_type "simpo" and cpo_alpha 0, the SimPO paper's loss)
// The batch's loss is the mean of the pair terms over the pairs of the (global) batch, plus
// ORPO's NLL; the metrics are TRL's (docs/PREFERENCE.md, "What is logged").
//
// The gradient goes back to the model through the per-token log-probabilities: pref_pair gives
// d(pair term) / d(log p of one target token), the same for every token of a completion; the
// classifier turns a per-row weight into the logits' gradient (llmc/model/prefmodel.h).
#ifndef LLMC_PREFLOSS_H
#define LLMC_PREFLOSS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PREF_SFT = 0, PREF_DPO, PREF_IPO, PREF_ORPO, PREF_SIMPO, PREF_N_OBJECTIVES } PrefObjective;
#define PREF_OBJECTIVE_NAMES "sft|dpo|ipo|orpo|simpo"

typedef struct {
    PrefObjective objective;
    double beta;             // dpo, ipo (tau), simpo: 0.1 (DPOConfig, CPOConfig)
    double label_smoothing;  // dpo (robust), simpo (conservative): in [0, 0.5), 0
    double orpo_lambda;      // orpo: the odds-ratio term's weight (ORPOConfig.beta, the paper's lambda): 0.1
    double simpo_gamma;      // simpo: the target margin: 0.5 (CPOConfig)
} PrefConfig;

// The objectives' names in PrefObjective order, NULL-terminated (a flag's choices).
extern const char* const PREF_NAMES[PREF_N_OBJECTIVES + 1];
// The objective of a name (PREF_OBJECTIVE_NAMES), or -1; its name.
int pref_objective_parse(const char* name);
const char* pref_objective_name(PrefObjective o);
// TRL's defaults, for objective o.
void pref_config_default(PrefConfig* c, PrefObjective o);
// The objective compares with a reference model (dpo, ipo); it adds the NLL of the chosen
// sequences (orpo).
int pref_uses_reference(PrefObjective o);
int pref_uses_nll(PrefObjective o);
// -1 with a message naming the flag (--beta, --label-smoothing, --orpo-lambda, --simpo-gamma) and
// the value in err when a setting is out of its range: beta and lambda > 0, label smoothing in
// [0, 0.5) and 0 for ipo and orpo (TRL has none there), gamma finite; else 0. pref_config_check:
// the same, fatal.
int pref_config_error(const PrefConfig* c, char* err, size_t cap);
void pref_config_check(const PrefConfig* c);

// Where a pair lies in a batch of B x T positions (flattened): the positions whose targets are
// the chosen completion's tokens and its stop, [c_begin, c_end), and the rejected one's; c_first
// is where the chosen record starts (its <|endoftext|>), so [c_first, c_end) predicts the whole
// chosen sequence (ORPO's NLL). Filled by the data loader (llmc/run/dataloader.h).
typedef struct {
    int c_first, c_begin, c_end;
    int r_begin, r_end;
} PrefPair;

// One pair's sequence log-probabilities: the sums over the completions' targets and their counts,
// and the reference model's sums (dpo, ipo).
typedef struct {
    double logp_c, logp_r;
    int n_c, n_r;
    double ref_c, ref_r;
} PrefSeqs;

typedef struct {
    double loss;             // the pair's term (orpo: -lambda log sig(o); the NLL is the batch's)
    double gc, gr;           // d loss / d log p of each target token of the chosen / rejected completion
    double reward_c, reward_r;
    double logps_c, logps_r; // as logged: sums (dpo, ipo) or averages (orpo, simpo)
    double log_odds;         // orpo: o
} PrefPairOut;

void pref_pair(const PrefConfig* c, const PrefSeqs* s, PrefPairOut* o);

// Metrics as sums over pairs, so that micro-batches and ranks add up (pref_metrics_add, then a
// sum over ranks); the means with pref_metrics_mean.
typedef struct {
    double pairs, loss, nll_sum, nll_tokens;
    double rewards_c, rewards_r, accuracies, margins, logps_c, logps_r, log_odds_ratio, log_odds_chosen;
} PrefMetrics;
#define PREF_METRICS_N 12 // doubles in PrefMetrics (a sum over ranks reduces it as an array)

void pref_metrics_add(PrefMetrics* m, const PrefPairOut* o);
// The means over the pairs (over the NLL's tokens for nll_sum), and the batch's loss: the mean
// pair term plus the mean NLL (orpo). Without pairs everything is 0.
typedef struct {
    double loss, nll_loss, rewards_c, rewards_r, accuracies, margins, logps_c, logps_r, log_odds_ratio, log_odds_chosen;
} PrefMeans;
void pref_metrics_mean(const PrefConfig* c, const PrefMetrics* m, PrefMeans* out);

#ifdef __cplusplus
}
#endif
#endif // LLMC_PREFLOSS_H
