// The run configuration (llmc/run/runconfig.h): flags -> validated configuration with derived values;
// the parsed flags are never rewritten (a defaulted total batch, an implied --qlora, the default
// sample length live in derived fields); batch arithmetic cannot wrap (a --total-batch-tokens that
// would need 2^32 or 2^31 micro-steps is refused naming the flag, as is one over the limit); the
// JSON form reads back to the same configuration, and a JSON file gets the command line's checks.
#include "test.h"
#include "test_child.h"
#include "../llmc/run/runconfig.h"
#include "../llmc/run/runrecord.h"
#include "../llmc/model/lora.h"
#include "../llmc/model/schedule.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof(a[0])))

static int same_str(const char* a, const char* b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

// Every flag of two configurations equal (strings by value).
static int same_flags(const TrainFlags* a, const TrainFlags* b) {
    const char* const sa[] = {a->model, a->train_data, a->val_data, a->out_dir, a->schedule, a->save_format, a->sample.prompt,
                              a->sample.vocab, a->lora_targets, a->lora_layers, a->adapter, a->lora_bias, a->resume, a->eval_batches, a->dtype, a->save_gguf,
                              a->objective, a->ref_model, a->lora_init};
    const char* const sb[] = {b->model, b->train_data, b->val_data, b->out_dir, b->schedule, b->save_format, b->sample.prompt,
                              b->sample.vocab, b->lora_targets, b->lora_layers, b->adapter, b->lora_bias, b->resume, b->eval_batches, b->dtype, b->save_gguf,
                              b->objective, b->ref_model, b->lora_init};
    for (int i = 0; i < ARGC(sa); i++) if (!same_str(sa[i], sb[i])) return 0;
    TrainFlags x = *a, y = *b; // the numbers: blank the pointers and compare the bytes
    const char** px[] = {&x.model, &x.train_data, &x.val_data, &x.out_dir, &x.schedule, &x.save_format, &x.sample.prompt,
                         &x.sample.vocab, &x.lora_targets, &x.lora_layers, &x.adapter, &x.lora_bias, &x.resume, &x.eval_batches, &x.dtype, &x.save_gguf,
                         &x.objective, &x.ref_model, &x.lora_init};
    const char** py[] = {&y.model, &y.train_data, &y.val_data, &y.out_dir, &y.schedule, &y.save_format, &y.sample.prompt,
                         &y.sample.vocab, &y.lora_targets, &y.lora_layers, &y.adapter, &y.lora_bias, &y.resume, &y.eval_batches, &y.dtype, &y.save_gguf,
                         &y.objective, &y.ref_model, &y.lora_init};
    for (int i = 0; i < ARGC(px); i++) { *px[i] = NULL; *py[i] = NULL; }
    return memcmp(&x, &y, sizeof(x)) == 0;
}

static void test_derived(void) {
    char* lora_args[] = {"train_lora", "--model", "test/ref/qlora_tiny/base_4bit", "--train-data", "x.bin", "-b", "2", "-t", "16",
                         "--sample-every", "5", "--lora-targets", "q,v", "--lora-bias", "lora_only", "--schedule", "wsd",
                         "--lora-dropout", "0.1", "--prompt", "Hi there", "--save-format", "hf", "--init", "gaussian"};
    RunConfig rc;
    runconfig_from_args(&rc, ARGC(lora_args), lora_args, TRAIN_LORA, 2);
    TEST_CHECK(rc.micro_tokens == 64 && rc.tokens_per_step == 64 && rc.accum == 1, "micro %lld step %lld accum %d",
               (long long)rc.micro_tokens, (long long)rc.tokens_per_step, rc.accum);
    TEST_CHECK(rc.f.total_batch_tokens == 0, "the --total-batch-tokens flag stays as given (0)");
    TEST_CHECK(rc.sample_tokens == 64 && rc.f.sample_tokens == 0, "sample tokens derived 64, flag stays 0");
    TEST_CHECK(rc.model_4bit && rc.qlora && !rc.f.qlora, "QLoRA implied by the 4-bit checkpoint; the flag stays 0");
    TEST_CHECK(rc.schedule == SCHED_WSD && rc.lora_bias == LORA_BIAS_LORA_ONLY, "schedule / bias kinds");
    TEST_CHECK(rc.lora_targets == (LORA_T_Q | LORA_T_V), "targets %#x", rc.lora_targets);
    TEST_CHECK(rc.lora_dropout_given && runconfig_given(&rc, "--lora-dropout") && !runconfig_given(&rc, "--lora-rank"), "given flags");
    TEST_CHECK(rc.save_hf && !rc.save_llmc, "--save-format hf");
    TEST_CHECK(!strcmp(rc.f.sample.prompt, "Hi there") && rc.f.batch_size == 2 && rc.f.lr == 2e-4f, "flags and LoRA defaults");

    // the JSON form reads back to the same configuration, and writes the same text again
    char* j1 = runconfig_to_json(&rc);
    RunConfig back;
    char err[1024];
    int rcode = runconfig_from_json(&back, j1, strlen(j1), "test.json", err, sizeof(err));
    TEST_CHECK(rcode == 0, "read back: %s", rcode ? err : "");
    if (rcode == 0) {
        char* j2 = runconfig_to_json(&back);
        TEST_CHECK(!strcmp(j1, j2), "JSON round trip changes the text:\n%s\nvs\n%s", j1, j2);
        TEST_CHECK(same_flags(&rc.f, &back.f), "flags differ after the round trip");
        TEST_CHECK(back.mode == rc.mode && back.world == 2 && back.accum == rc.accum && back.qlora == rc.qlora &&
                   back.sample_tokens == rc.sample_tokens && !memcmp(back.given, rc.given, sizeof(rc.given)), "derived values differ");
        TEST_CHECK(rc.lora_init == LORA_INIT_GAUSSIAN && back.lora_init == LORA_INIT_GAUSSIAN && !strcmp(back.f.lora_init, "gaussian"),
                   "--init gaussian: %d, read back %d (%s)", rc.lora_init, back.lora_init, back.f.lora_init);
        printf("ok   round trip of a train_lora configuration (%zu bytes of JSON)\n", strlen(j1));
        free(j2);
        // a recorded configuration with command-line flags over it (what a resume reads)
        char* over[] = {"train_lora", "--lr", "0.01", "--total-batch-tokens", "128", "--out", "elsewhere"};
        runconfig_parse_args(&back, ARGC(over), over);
        const char* hint = NULL;
        rcode = runconfig_derive(&back, 2, err, sizeof(err), &hint);
        TEST_CHECK(rcode == 0, "derive after overriding: %s", rcode ? err : "");
        TEST_CHECK(back.f.lr == 0.01f && !strcmp(back.f.out_dir, "elsewhere") && back.accum == 2 && back.f.batch_size == 2 &&
                   !strcmp(back.f.sample.prompt, "Hi there") && back.qlora, "overridden flags / derived values");
        TEST_CHECK(runconfig_given(&back, "--lr") && runconfig_given(&back, "--out") && !runconfig_given(&back, "--prompt"),
                   "given marks exactly the overriding flags");
        runconfig_free(&back);
    }
    free(j1);
    runconfig_free(&rc);

    char* full_args[] = {"train_gpt2", "--model", "tiny", "--train-data", "x.bin", "-b", "4", "-t", "32", "--total-batch-tokens", "1024",
                         "--lr", "0.001", "--val-data", "v.bin"};
    runconfig_from_args(&rc, ARGC(full_args), full_args, TRAIN_FULL, 1);
    TEST_CHECK(rc.accum == 8 && rc.tokens_per_step == 1024 && rc.sample_tokens == 0 && !rc.qlora, "accum %d", rc.accum);
    j1 = runconfig_to_json(&rc);
    rcode = runconfig_from_json(&back, j1, strlen(j1), "full.json", err, sizeof(err));
    TEST_CHECK(rcode == 0 && same_flags(&rc.f, &back.f) && back.mode == TRAIN_FULL && back.accum == 8, "train_gpt2 round trip: %s", rcode ? err : "");
    if (rcode == 0) runconfig_free(&back);
    free(j1);
    runconfig_free(&rc);
}

typedef struct { const char* total; int world; } BatchCase;
static void child_batch(void* arg) {
    const BatchCase* bc = (const BatchCase*)arg;
    char* args[] = {"train_gpt2", "--model", "tiny", "--train-data", "x.bin", "-b", "2", "-t", "16", "--total-batch-tokens", (char*)bc->total};
    RunConfig rc;
    runconfig_from_args(&rc, ARGC(args), args, TRAIN_FULL, bc->world);
    printf("accum %d\n", rc.accum); // not reached
}

static void test_batch_limits(void) {
    // 32 tokens per micro-step: 32 x 2^32 made the old int accumulation count 0 (trains nothing,
    // exits 0), 32 x 2^31 made it negative (an 18 EB allocation)
    const char* want[] = {"--total-batch-tokens", "micro-steps", NULL};
    BatchCase zero = {"137438953472", 1}, neg = {"68719476736", 1}, over = {"67108928", 2};
    TEST_CHECK(test_expect_fatal("2^32 micro-steps", child_batch, &zero, want), "2^32 micro-steps not refused");
    TEST_CHECK(test_expect_fatal("2^31 micro-steps", child_batch, &neg, want), "2^31 micro-steps not refused");
    TEST_CHECK(test_expect_fatal("2^20 + 1 micro-steps", child_batch, &over, want), "2^20 + 1 micro-steps on 2 ranks not refused");
    const char* multiple[] = {"--total-batch-tokens 33 is not a multiple of 2 x 16 x 1 = 32", NULL};
    BatchCase odd = {"33", 1};
    TEST_CHECK(test_expect_fatal("not a multiple", child_batch, &odd, multiple), "non-multiple not refused");
    BatchCase ok = {"1048576", 1}; // 2^15 micro-steps: allowed
    char out[4096];
    TEST_CHECK(test_run_child(child_batch, &ok, out, sizeof(out)) == 0, "2^15 micro-steps refused: %s", out);
}

static void expect_json_error(const char* what, const char* text, const char* want) {
    RunConfig rc;
    char err[1024] = "";
    int rcode = runconfig_from_json(&rc, text, strlen(text), "bad.json", err, sizeof(err));
    TEST_CHECK(rcode != 0 && strstr(err, want) && strstr(err, "bad.json"), "%s: expected an error naming '%s', got %s", what, want,
               rcode ? err : "success");
    if (rcode == 0) runconfig_free(&rc);
    else printf("ok   %s -> %s\n", what, err);
}

// A JSON configuration goes through the command line's checks.
static void test_json_checks(void) {
    char* args[] = {"train_gpt2", "--model", "tiny", "--train-data", "x.bin", "-b", "2", "-t", "16"};
    RunConfig rc;
    runconfig_from_args(&rc, ARGC(args), args, TRAIN_FULL, 1);
    char* good = runconfig_to_json(&rc);
    runconfig_free(&rc);
    char buf[16384];
    const struct { const char* what; const char* from; const char* to; const char* want; } cases[] = {
        {"batch size out of range", "\"batch_size\": 2", "\"batch_size\": 0", "--batch-size: 0 is out of range"},
        {"schedule not a choice", "\"schedule\": \"cosine\"", "\"schedule\": \"saw\"", "--schedule: 'saw'"},
        {"string for a number", "\"seq_len\": 16", "\"seq_len\": \"16\"", "--seq-len: not an integer"},
        {"unknown member", "\"seq_len\": 16", "\"seq_lenn\": 16", "unknown member \"seq_lenn\""},
        {"LoRA flag in a train_gpt2 file", "\"seq_len\": 16", "\"lora_rank\": 4", "unknown member \"lora_rank\""},
        {"derived value disagrees", "\"accum\": 1", "\"accum\": 2", "\"accum\""},
        {"not a multiple", "\"total_batch_tokens\": 0", "\"total_batch_tokens\": 33", "--total-batch-tokens 33"},
        {"wrong format", "llmc-ft run config", "something else", "not a run configuration"},
    };
    for (int i = 0; i < ARGC(cases); i++) {
        const char* at = strstr(good, cases[i].from);
        TEST_CHECK(at != NULL, "%s: '%s' not in the JSON", cases[i].what, cases[i].from);
        if (!at) continue;
        snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - good), good, cases[i].to, at + strlen(cases[i].from));
        expect_json_error(cases[i].what, buf, cases[i].want);
    }
    expect_json_error("malformed JSON", "{\"format\": ", "bad.json");
    free(good);
}

// Every flag of both trainers has a rule for what changing it on resume does (llmc/run/runrecord.c):
// a new flag without one would be refused on every resume that gives it.
static void test_resume_rules(void) {
    for (int mode = TRAIN_FULL; mode <= TRAIN_LORA; mode++) {
        RunConfig rc;
        memset(&rc, 0, sizeof(rc));
        runconfig_defaults(&rc, (TrainMode)mode);
        ArgSpec specs[RUNCFG_MAX_FLAGS];
        int n = runconfig_flag_table(&rc, specs), missing = 0;
        for (int i = 0; i < n; i++) {
            char key[128];
            ChangeKind kind;
            const char* why;
            args_json_key(&specs[i], key, sizeof(key));
            if (runrecord_change_kind(key, &kind, &why) != 0) { missing++; printf("no resume rule for %s\n", specs[i].name); }
        }
        TEST_CHECK(missing == 0, "%s: %d flags without a resume rule", runconfig_program((TrainMode)mode), missing);
        printf("ok   %s: all %d flags have a resume rule\n", runconfig_program((TrainMode)mode), n);
        runconfig_free(&rc);
    }
}

// --batch-size auto / --recompute auto: the word is kept (ARG_AUTO, written back as "auto") until
// the plan resolves it (runconfig_resolve), which derives the accumulation; auto needs the global
// batch, in whole sequences of every rank.
static void derive_args(RunConfig* rc, char** argv, int argc, int world, int* rcode, char* err, size_t cap) {
    const char* hint;
    memset(rc, 0, sizeof(*rc));
    runconfig_defaults(rc, TRAIN_FULL);
    runconfig_parse_args(rc, argc, argv);
    *rcode = runconfig_derive(rc, world, err, cap, &hint);
}

static void test_auto(void) {
    char* args[] = {"train_gpt2", "--model", "d6", "--train-data", "x.bin", "-t", "16", "--batch-size", "auto", "--recompute", "auto",
                    "--total-batch-tokens", "192"};
    RunConfig rc;
    char err[1024];
    int rcode;
    derive_args(&rc, args, ARGC(args), 2, &rcode, err, sizeof(err));
    TEST_CHECK(rcode == 0 && rc.f.batch_size == ARG_AUTO && rc.f.recompute == ARG_AUTO && rc.accum == 0 && rc.tokens_per_step == 192,
               "auto: %s B %d r %d accum %d tokens %lld", rcode ? err : "", rc.f.batch_size, rc.f.recompute, rc.accum, (long long)rc.tokens_per_step);
    char* j = runconfig_to_json(&rc);
    TEST_CHECK(strstr(j, "\"batch_size\": \"auto\"") && strstr(j, "\"recompute\": \"auto\""), "the JSON keeps the word: %s", j);
    RunConfig back;
    rcode = runconfig_from_json(&back, j, strlen(j), "auto.json", err, sizeof(err));
    TEST_CHECK(rcode == 0 && back.f.batch_size == ARG_AUTO && back.f.recompute == ARG_AUTO, "read back: %s", rcode ? err : "");
    if (rcode == 0) runconfig_free(&back);
    free(j);
    runconfig_resolve(&rc, 3, 1); // 192 tokens = 2 ranks x 16 x 6 sequences: B 3 -> 2 micro-steps
    TEST_CHECK(rc.f.batch_size == 3 && rc.f.recompute == 1 && rc.accum == 2 && rc.micro_tokens == 96 && runconfig_given(&rc, "--batch-size"),
               "resolved: B %d r %d accum %d micro %lld", rc.f.batch_size, rc.f.recompute, rc.accum, (long long)rc.micro_tokens);
    j = runconfig_to_json(&rc);
    TEST_CHECK(strstr(j, "\"batch_size\": 3,") && strstr(j, "\"recompute\": 1,") && strstr(j, "\"accum\": 2"), "the record holds the choice: %s", j);
    free(j);
    runconfig_resolve(&rc, 6, 2); // (numbers stay: only a word is resolved)
    TEST_CHECK(rc.f.batch_size == 3 && rc.f.recompute == 1, "a second resolve changed B %d r %d", rc.f.batch_size, rc.f.recompute);
    runconfig_free(&rc);
    printf("ok   --batch-size auto / --recompute auto: kept as the word until resolved, then recorded with the accumulation\n");

    char* none[] = {"train_gpt2", "--model", "d6", "--train-data", "x.bin", "-t", "16", "--batch-size", "auto"};
    derive_args(&rc, none, ARGC(none), 1, &rcode, err, sizeof(err));
    TEST_CHECK(rcode && strstr(err, "--batch-size auto needs --total-batch-tokens"), "auto without a total: %s", rcode ? err : "accepted");
    runconfig_free(&rc);
    char* odd[] = {"train_gpt2", "--model", "d6", "--train-data", "x.bin", "-t", "16", "--batch-size", "auto", "--total-batch-tokens", "48"};
    derive_args(&rc, odd, ARGC(odd), 2, &rcode, err, sizeof(err));
    TEST_CHECK(rcode && strstr(err, "--total-batch-tokens 48 is not a multiple of --seq-len 16 x 2 ranks = 32"), "auto, odd total: %s", rcode ? err : "accepted");
    runconfig_free(&rc);
    char* plan[] = {"train_gpt2", "--model", "d6", "--plan"};
    derive_args(&rc, plan, ARGC(plan), 1, &rcode, err, sizeof(err));
    TEST_CHECK(rcode == 0 && rc.f.plan, "--plan needs no --train-data: %s", rcode ? err : "");
    runconfig_free(&rc);
    printf("ok   auto without --total-batch-tokens, or with one that is not whole sequences of every rank: refused; --plan without data\n");
}

// A flag given several times (ARG_STRS, llmc/run/args.h): every value kept in order, written as a
// JSON array and read back from one; one time more than it holds is refused by name.
static ArgStrs g_list;
static ArgSpec g_list_spec = {"--adapter", NULL, ARG_STRS, &g_list, "DIR", "a list", 1, 0, NULL};

static void child_list_full(void* arg) {
    char* argv[2 * ARG_STRS_MAX + 3] = {"prog"};
    for (int i = 0; i <= ARG_STRS_MAX; i++) { argv[1 + 2 * i] = "--adapter"; argv[2 + 2 * i] = "x"; }
    memset(&g_list, 0, sizeof(g_list));
    args_parse(2 * ARG_STRS_MAX + 3, argv, &g_list_spec, 1, "usage", NULL);
}

static void test_arg_list(void) {
    char* argv[] = {"prog", "--adapter", "a/b", "--adapter=c", "--adapter", "d"};
    memset(&g_list, 0, sizeof(g_list));
    args_parse(ARGC(argv), argv, &g_list_spec, 1, "usage", NULL);
    TEST_CHECK(g_list.n == 3 && !strcmp(g_list.v[0], "a/b") && !strcmp(g_list.v[1], "c") && !strcmp(g_list.v[2], "d"),
               "three --adapter values in order: %d", g_list.n);
    char text[64];
    args_value_text(&g_list_spec, text, sizeof(text));
    TEST_CHECK(!strcmp(text, "a/b, c, d"), "value text '%s'", text);
    JsonWriter w;
    jw_init(&w, 0);
    jw_begin_object(&w);
    args_write_json(&w, &g_list_spec);
    jw_end_object(&w);
    TEST_CHECK(!strcmp(w.buf, "{\"adapter\":[\"a/b\",\"c\",\"d\"]}"), "JSON '%s'", w.buf);
    char err[256];
    JsonValue* js = json_parse("[\"e\", \"f\"]", 10, err, sizeof(err));
    TEST_CHECK(js && args_set_json(&g_list_spec, js, err, sizeof(err)) == 0 && g_list.n == 2 && !strcmp(g_list.v[1], "f"),
               "read back from a JSON array: %d", g_list.n);
    json_free(js);
    js = json_parse("[\"e\", 3]", 8, err, sizeof(err));
    TEST_CHECK(js && args_set_json(&g_list_spec, js, err, sizeof(err)) != 0 && strstr(err, "element 1 is not a string"),
               "a number in the array refused: %s", err);
    json_free(js);
    jw_free(&w);
    const char* const want[] = {"--adapter: given more than 16 times", NULL};
    TEST_CHECK(test_expect_fatal("17 --adapter", child_list_full, NULL, want), "17 values not refused");
}

int main(void) {
    test_arg_list();
    test_resume_rules();
    test_auto();
    test_derived();
    test_batch_limits();
    test_json_checks();
    return test_finish("test_runconfig");
}
