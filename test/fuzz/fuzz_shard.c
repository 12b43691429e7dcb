// Token shards with loss masks (llmc/run/dataloader.c). Input: 4 bytes of loader settings (B, T,
// world, rank, shuffle), then the shard file, optionally FUZZ_SEP and its .mask sidecar. The
// loader is opened and walked for a few batches (crossing epochs on small shards), then restored
// to a fuzzed position. Every target it produces is -1 or a token below the vocabulary size, and
// the record starts are runs of positions, one starting each window.
#include "fuzz.h"
#include "run/dataloader.h"

#define FUZZ_SEP "\n==mask==\n"
#define VOCAB 300

static uint8_t g_cfg[4];

static void walk(void) {
    int B = 1 + (g_cfg[0] & 3), T = 1 + (g_cfg[1] & 15), world = 1 + (g_cfg[2] & 3), rank = (g_cfg[2] >> 2) % world;
    DataLoader dl;
    dl_init(&dl, fuzz_path("x.bin"), B, T, rank, world, VOCAB, g_cfg[3] & 1, g_cfg[3] >> 1);
    int in[64], tg[64], ds[64];
    for (int k = 0; k < 5; k++) {
        dl_next(&dl, in, tg, ds);
        for (int i = 0; i < B * T; i++) {
            if (in[i] < 0 || in[i] >= VOCAB || tg[i] < -1 || tg[i] >= VOCAB) abort();
            // record starts: runs of positions, each window starting one
            const int t = i % T;
            if (t == 0 ? ds[i] != 0 : ds[i] != ds[i - 1] && ds[i] != t) abort();
        }
    }
    DataLoaderState st = { g_cfg[3] & 3, g_cfg[1] >> 4, g_cfg[0] >> 2 };
    dl_set_state(&dl, st);
    dl_next(&dl, in, tg, ds);
    dl_free(&dl);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_setup();
    if (size < 4) return 0;
    memcpy(g_cfg, data, 4);
    fuzz_write_pair(data + 4, size - 4, FUZZ_SEP, "x.bin", "x.mask");
    FUZZ_RUN(walk());
    return 0;
}
