// Scoring (llmc/model/scorer.h): the log-probability of given completions under the model.
// - equals transformers' (each sequence alone, fp32, log_softmax summed in float64) on a tiny
//   GPT-2 and on another with a PEFT adapter, within 1e-4 (test/ref/score_ref.safetensors, made
//   by dev/gen_score_ref.py), whether a sequence is scored alone or packed with the others, its
//   tokens from a first one on or those a mask selects;
// - the batch's packing splits where the rows fill: one forward of rows too short for all returns
//   how many fit, and scoring the rest gives the same numbers.
#include "test.h"
#include "../llmc/model/model.h"
#include "../llmc/model/scorer.h"
#include "../llmc/base/safetensors.h"

#define REF "test/ref/score_ref.safetensors"
#define MAXS 16

typedef struct { int S; int ids[1024]; unsigned char mask[1024]; ScoreSeq seqs[MAXS]; double want[MAXS]; } ScoreRef;

// key: the case's sums; masked: the sequences score the tokens of the reference's mask.
static void ref_load(ScoreRef* r, const char* key, int masked) {
    StFile f;
    st_open(&f, REF);
    const StTensor* tl = st_find(&f, "lens");
    r->S = (int)tl->shape[0];
    TEST_CHECK(r->S <= MAXS && st_find(&f, "ids")->shape[0] <= 1024, "reference too large");
    int lens[MAXS], firsts[MAXS];
    st_read_i32(&f, tl, lens);
    st_read_i32(&f, st_find(&f, "firsts"), firsts);
    st_read_i32(&f, st_find(&f, "ids"), r->ids);
    st_read_raw(&f, st_find(&f, "mask"), r->mask);
    char name[64];
    snprintf(name, sizeof(name), "%s%s", key, masked ? ".masked" : "");
    st_read_raw(&f, st_find(&f, name), r->want);
    st_close(&f);
    for (int i = 0, off = 0; i < r->S; off += lens[i], i++)
        r->seqs[i] = (ScoreSeq){ r->ids + off, lens[i], firsts[i], masked ? r->mask + off : NULL };
}

static void model_open(Model* x, const char* path, const char* adapter, int B, int T) {
    LoraSource src;
    ModelSpec spec;
    memset(&src, 0, sizeof(src));
    memset(&spec, 0, sizeof(spec));
    spec.path = path;
    spec.B = B; spec.T = T;
    src.adapter = adapter;
    if (adapter) spec.lora_src = &src;
    model_assemble(x, &spec);
}

// Scores every sequence of r in forwards of B x T; returns the number of forwards.
static int score_all(Scorer* s, GPT2* m, const ScoreRef* r, double* got) {
    int calls = 0;
    for (int i = 0; i < r->S; calls++) i += scorer_run(s, m, r->seqs + i, r->S - i, got + i);
    return calls;
}

static void check_case(const char* what, const ScoreRef* r, const double* got) {
    double worst = 0.0;
    int bad = 0;
    for (int i = 0; i < r->S; i++) {
        const double d = fabs(got[i] - r->want[i]);
        if (!(d <= 1e-4 + 1e-5 * fabs(r->want[i]))) bad++;
        if (!(d <= worst)) worst = d;
    }
    TEST_CHECK(bad == 0, "%s: %d of %d log-probabilities off transformers' (worst %.3g)", what, bad, r->S, worst);
    if (!bad) printf("ok   %s (%d sequences, max abs diff %.3g)\n", what, r->S, worst);
}

static void test_case(const char* key, const char* path, const char* adapter, int masked) {
    ScoreRef r;
    ref_load(&r, key, masked);
    Model x;
    model_open(&x, path, adapter, 4, 64);
    double alone[MAXS], packed[MAXS], narrow[MAXS];
    Scorer s;
    char what[160];
    for (int i = 0; i < r.S; i++) { // each in a forward of its own
        scorer_init(&s, 1, r.seqs[i].n - 1);
        TEST_CHECK(scorer_run(&s, &x.gpt, r.seqs + i, 1, alone + i) == 1, "sequence %d alone", i);
        scorer_free(&s);
    }
    snprintf(what, sizeof(what), "%s%s: each sequence alone == transformers'", key, masked ? " (masked)" : "");
    check_case(what, &r, alone);
    scorer_init(&s, 4, 64);
    const int calls = score_all(&s, &x.gpt, &r, packed);
    scorer_free(&s);
    snprintf(what, sizeof(what), "%s%s: packed 4 x 64 (%d forwards) == transformers'", key, masked ? " (masked)" : "", calls);
    check_case(what, &r, packed);
    scorer_init(&s, 2, 60); // 246 positions of sequences in 120: several forwards, rows split
    const int ncalls = score_all(&s, &x.gpt, &r, narrow);
    scorer_free(&s);
    TEST_CHECK(ncalls > calls, "2 x 60 rows took %d forwards, 4 x 64 took %d", ncalls, calls);
    snprintf(what, sizeof(what), "%s%s: packed 2 x 60 (%d forwards) == transformers'", key, masked ? " (masked)" : "", ncalls);
    check_case(what, &r, narrow);
    model_free(&x);
}

int main(void) {
    ops_init(0);
    for (int masked = 0; masked < 2; masked++) {
        test_case("base", "test/ref/sampling_tiny", NULL, masked);
        test_case("lora", "test/ref/gpt2_tiny", "test/ref/lora_tiny/all_linear", masked);
    }
    return test_finish("test_scorer");
}
