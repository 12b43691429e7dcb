// Model FLOPs per token and the peak bf16 FLOP/s table (llmc/base/mfu.h).
#include <ctype.h>
#include <strings.h>
#include <string.h>
#include "base/mfu.h"

double mfu_flops_per_token(size_t n_base, int base_frozen, size_t n_adapter, int L, int C, int T) {
    double base = (base_frozen ? 4.0 : 6.0) * (double)n_base;
    return base + 6.0 * (double)n_adapter + 6.0 * (double)L * (double)C * (double)T;
}

// Dense bf16 tensor-core peaks with fp32 accumulation, from NVIDIA's data sheets and architecture
// white papers (their headline figures with sparsity are twice these). A device matches an entry
// when every one of its words appears as a whole word in the name (words: runs of letters and
// digits), so "A10" does not match "A100" and "H200" does not match "GH200". More specific
// entries come first.
typedef struct { const char* model; const char* words[3]; double tflops; } PeakEntry;
static const PeakEntry PEAKS[] = {
    {"GB200", {"GB200"}, 2500.0},
    {"B200", {"B200"}, 2250.0},
    {"GH200", {"GH200"}, 989.4},
    {"H200 NVL", {"H200", "NVL"}, 835.5},
    {"H200 SXM", {"H200"}, 989.4},
    {"H100 PCIe", {"H100", "PCIe"}, 756.5},
    {"H100 NVL", {"H100", "NVL"}, 835.5},
    {"H100 SXM", {"H100"}, 989.4},
    {"H800 PCIe", {"H800", "PCIe"}, 756.5},
    {"H800 SXM", {"H800"}, 989.4},
    {"A100", {"A100"}, 312.0},
    {"A800", {"A800"}, 312.0},
    {"A30", {"A30"}, 165.0},
    {"A40", {"A40"}, 149.7},
    {"A10", {"A10"}, 125.0},
    {"L40S", {"L40S"}, 362.1},
    {"L40", {"L40"}, 181.0},
    {"L4", {"L4"}, 121.0},
    {"RTX 6000 Ada", {"RTX", "6000", "Ada"}, 364.2},
    {"RTX A6000", {"A6000"}, 154.8},
    {"RTX 4090", {"4090"}, 165.2},
    {"RTX 3090", {"3090"}, 71.0},
};

// whether `word` occurs in s delimited by non-alphanumerics (case-insensitive)
static int mfu_has_word(const char* s, const char* word) {
    size_t n = strlen(word);
    for (const char* p = s; *p; p++) {
        if (p != s && isalnum((unsigned char)p[-1])) continue;
        if (strncasecmp(p, word, n) == 0 && !isalnum((unsigned char)p[n])) return 1;
    }
    return 0;
}

double mfu_peak_bf16_flops(const char* device, const char** model) {
    if (model) *model = NULL;
    if (!device) return 0.0;
    for (size_t i = 0; i < sizeof(PEAKS) / sizeof(PEAKS[0]); i++) {
        const PeakEntry* e = &PEAKS[i];
        int all = 1;
        for (int w = 0; w < 3 && e->words[w]; w++) all &= mfu_has_word(device, e->words[w]);
        if (all) {
            if (model) *model = e->model;
            return e->tflops * 1e12;
        }
    }
    return 0.0;
}
