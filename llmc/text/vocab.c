#include "text/vocab.h"
#include "base/fileio.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char* VOCAB_PAIRS[2][2] = {{"encoder.json", "vocab.bpe"}, {"vocab.json", "merges.txt"}};

int vocab_dir_has(const char* dir) {
    VocabFiles f;
    return dir_exists(dir) && vocab_files(dir, &f) == 0;
}

static int vocab_ends_with(const char* s, const char* suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

// A single file: tokenizer.json, or one half of a pair whose partner sits next to it.
static int vocab_file_partner(const char* path, VocabFiles* f) {
    char dir[LLMC_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash) *slash = '\0'; else snprintf(dir, sizeof(dir), ".");
    int is_merges = vocab_ends_with(path, ".bpe") || vocab_ends_with(path, ".txt");
    if (!is_merges && vocab_ends_with(path, "tokenizer.json")) { snprintf(f->tokenizer_json, sizeof(f->tokenizer_json), "%s", path); return 0; }
    if (!is_merges && !vocab_ends_with(path, ".json")) return -1;
    for (int p = 0; p < 2; p++) {
        char other[LLMC_PATH_MAX];
        path_join(other, sizeof(other), dir, VOCAB_PAIRS[p][is_merges ? 0 : 1]);
        if (!file_exists(other)) continue;
        snprintf(f->vocab, sizeof(f->vocab), "%s", is_merges ? other : path);
        snprintf(f->merges, sizeof(f->merges), "%s", is_merges ? path : other);
        return 0;
    }
    return -1;
}

int vocab_files(const char* path, VocabFiles* f) {
    memset(f, 0, sizeof(*f));
    if (!dir_exists(path)) return file_exists(path) ? vocab_file_partner(path, f) : -1;
    for (int p = 0; p < 2; p++) {
        path_join(f->vocab, sizeof(f->vocab), path, VOCAB_PAIRS[p][0]);
        path_join(f->merges, sizeof(f->merges), path, VOCAB_PAIRS[p][1]);
        if (file_exists(f->vocab) && file_exists(f->merges)) return 0;
    }
    f->vocab[0] = f->merges[0] = 0;
    path_join(f->tokenizer_json, sizeof(f->tokenizer_json), path, "tokenizer.json");
    if (file_exists(f->tokenizer_json)) return 0;
    f->tokenizer_json[0] = 0;
    return -1;
}

int vocab_find_bundled(char* out, size_t cap) {
    if (vocab_dir_has("data/gpt2")) { snprintf(out, cap, "data/gpt2"); return 0; }
    char exe[LLMC_PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    char* slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = 0; // the program's directory
    char dir[LLMC_PATH_MAX], cand[LLMC_PATH_MAX];
    // (a candidate that does not fit is no candidate)
    if (snprintf(cand, sizeof(cand), "%s/gpt2", exe) < (int)sizeof(cand) && vocab_dir_has(cand)) { snprintf(out, cap, "%s", cand); return 0; }
    snprintf(dir, sizeof(dir), "%s", exe);
    for (int up = 0; up <= 3; up++) {
        if (snprintf(cand, sizeof(cand), "%s/data/gpt2", dir) < (int)sizeof(cand) && vocab_dir_has(cand)) { snprintf(out, cap, "%s", cand); return 0; }
        char* s = strrchr(dir, '/');
        if (!s || s == dir) break; // reached the root
        *s = 0;
    }
    return -1;
}
