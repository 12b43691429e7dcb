// Sampling from a GPT-2: a key/value cache with an incremental forward (each new token costs one
// row through the model instead of the whole sequence), and the token choice (greedy, or
// temperature + top-k with a counter-based RNG, so a seed reproduces a completion exactly).
//
// The incremental forward runs the same layers as gpt2_forward (linear_forward, so LoRA
// adapters apply; layernorms and attention through the op interface) and computes logits for
// the last position only. Without a cache, the same generation loop recomputes gpt2_forward
// over the whole sequence for every token (slow, for tests and --no-kv-cache).
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <stdint.h>
#include "model/gpt2.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    GPT2* m;
    int B, maxT;        // capacity: B sequences of up to maxT tokens
    int chunk;          // most new tokens per forward call (prompts are fed in chunks)
    int pos;            // tokens already in the cache
    floatX* kcache;     // (L, B, NH, maxT, HS)
    floatX* vcache;
    uint16_t* kcache16; // instead, with bf16 GEMMs on an fp32 backend (the CPU's --dtype bf16): the
    uint16_t* vcache16; //   caches in bf16, half the bytes each token reads (attention_forward_kv16)
    void* mem;          // one allocation for the per-call activations below
    floatX *x, *res2, *ln, *qkv, *atty, *proj, *fch, *fch_gelu, *fcproj, *logits; // rows: B * chunk
    float *mean, *rstd;
    int* tokens_dev;    // (B * chunk) ids of the new tokens, backend memory
    float* logits_host; // (B, Vp): fp32 logits of the last position of each sequence
    uint16_t* wte16;    // bf16 GEMMs on an fp32 backend, the model's wte trained (no gpt2.wte16):
                        // the lm_head rounded once per sequence, not once per token (NULL otherwise)
} KVCache;

// Allocate a cache for B sequences of up to maxT tokens (maxT <= the model's n_positions).
// With LoRA adapters, attach them before this (their scratch bounds the chunk size).
void kv_init(KVCache* kv, GPT2* m, int B, int maxT);
void kv_free(KVCache* kv);
void kv_reset(KVCache* kv);          // forget the cached tokens
size_t kv_bytes(const KVCache* kv);  // cache + activations, for the memory report
// Feed Tn new tokens per sequence (tokens: host (B, Tn)), at positions [pos, pos + Tn).
// Returns host fp32 logits (B, Vp) of the last new position (valid until the next call).
const float* kv_forward(KVCache* kv, const int* tokens, int Tn);
// Feed Tn tokens of one sequence (a prompt every row shares) at [pos, pos + Tn) once, as sequence
// 0, then copy sequence 0's cache to the other B - 1: every row continues the same prefix.
// Returns host fp32 logits (1, Vp) of the last position (valid until the next call).
const float* kv_prefill_shared(KVCache* kv, const int* tokens, int Tn);

// How a token is chosen, in the order transformers' generate applies its logits processors
// (RepetitionPenalty, Temperature, TopK, TopP, MinP). A field left 0 (a zero-initialized struct)
// is off, except the temperature (0: greedy).
typedef struct {
    float temperature;  // <= 0: greedy (argmax)
    int top_k;          // 0: whole vocabulary
    uint64_t seed;
    float top_p;        // keep the most likely tokens whose mass reaches top_p; <= 0 or >= 1: off
    float min_p;        // drop the tokens less likely than min_p x the most likely; <= 0: off
    float repetition_penalty; // sample_penalize's R in sample_generate(_batch); <= 0 or 1: off
} SampleParams;

// RNG stream of token choices (llmc/base/rand.h): token i of a completion uses counter i.
#define SAMPLE_RNG_STREAM 0x53414d504c45ull

// transformers' RepetitionPenaltyLogitsProcessor on logits[0..V) in place: every token id present
// in seq[0..n) (the prompt and the tokens generated so far), each once however often it occurs:
// a logit < 0 is multiplied by R, any other divided by R. Ids outside [0, V) are ignored.
// R > 1 discourages repeats, R < 1 encourages them; R = 1 changes nothing.
void sample_penalize(float* logits, int V, const int* seq, int n, float R);

// The distribution sample_token draws from, as probabilities over all V ids (0 for the tokens
// filtered out), and kept[i] = 1 for the tokens kept (kept may be NULL; a kept token's
// probability can underflow to 0); returns how many tokens are kept. Greedy: 1 for the first maximum. Otherwise,
// as transformers' warpers: top_k keeps every token whose logit is >= the k-th largest (ties at
// the boundary all kept); the softmax at the temperature over those; top_p keeps, from the most
// likely down (ties in increasing id order; transformers leaves tied tokens in whatever order
// torch.sort gives, which is not stable), each token whose more likely tokens hold less than
// top_p of the mass (so the one that crosses top_p is kept, and the most likely always); min_p
// keeps the tokens at least min_p times as likely as the most likely; the rest renormalized.
// probs, kept: V entries.
int sample_probs(const float* logits, int V, const SampleParams* sp, float* probs, int* kept);

// The counter of token i of row r of a batch (sample_generate_batch): row 0 uses sample_generate's
// counters, so its sample is the single-sequence one; rows apart by 2^32 (n_new < 2^32).
#define SAMPLE_ROW_COUNTER(r, i) (((uint64_t)(r) << 32) + (uint64_t)(i))

// Choose a token from fp32 logits[0..V). scratch: V floats + V ints (or NULL: allocated here).
// Greedy picks the first maximum. Otherwise the tokens sample_probs keeps, in increasing id
// order, and their unnormalized probabilities exp((logit - max) / temperature): one is drawn
// with u = rand_uniform(seed, stream, counter), the first token whose cumulative weight exceeds
// u times the total. (With every filter off, as before top-p and min-p existed: the same seed
// gives the same token.)
int sample_token(const float* logits, int V, const SampleParams* sp, uint64_t counter, float* scratch_f, int* scratch_i);

// Per generated token: its id, and the model's logits at that step (fp32, V entries; before the
// repetition penalty). Returns non-zero to end the generation after this token (e.g. a chat reply
// reached its stop text), 0 to go on.
typedef int (*SampleCallback)(void* ctx, int token, const float* logits, int V);

// Generate up to n_new tokens after prompt[0..n_prompt) for one sequence (n_prompt >= 1).
// kv: a cache for B = 1 (reset here) or NULL to recompute the full forward for every token, which needs
// activations for B >= 1 and T >= n_prompt + n_new - 1 (gpt2_alloc_acts). Stops early after
// emitting stop_id (-1: never) or when cb asks to. With sp->repetition_penalty on, each step's
// logits are penalized (sample_penalize, over the prompt and the tokens so far) before
// sample_token. Writes the generated ids to out (may be NULL); returns how many.
int sample_generate(GPT2* m, KVCache* kv, const int* prompt, int n_prompt, int n_new,
                    const SampleParams* sp, int stop_id, int* out, SampleCallback cb, void* ctx);

// Per generated token of row r of a batch: as SampleCallback; non-zero ends that row.
typedef int (*SampleRowCallback)(void* ctx, int row, int token, const float* logits, int V);

// B = kv->B continuations of prompt[0..n_prompt) at once: the prompt is fed once and shared
// (kv_prefill_shared), then every step feeds each row's last token in one kv_forward, so the
// weights are read once a step for all rows. Row r draws token i with counter
// SAMPLE_ROW_COUNTER(r, i): row 0 is what sample_generate gives (the repetition penalty too: each
// row over the prompt and its own tokens). A row ends after emitting
// stop_id (-1: never), when cb asks, or after n_new tokens; the batch ends when every row has
// ended (ended rows are still fed, their tokens unused). kv: reset here; maxT >= n_prompt + n_new - 1.
// Returns the tokens emitted over all rows.
int sample_generate_batch(GPT2* m, KVCache* kv, const int* prompt, int n_prompt, int n_new,
                          const SampleParams* sp, int stop_id, SampleRowCallback cb, void* ctx);

#ifdef __cplusplus
}
#endif
#endif // LLMC_SAMPLER_H
