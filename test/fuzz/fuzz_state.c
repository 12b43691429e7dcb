// Checkpoint state files and DONE manifests (llmc/run/checkpoint.c, checkpoint_manifest.c). Input: the
// manifest text, FUZZ_SEP, rank 0's state file, optionally FUZZ_SEP and rank 1's. They become a
// checkpoint of step 1 in a directory, which goes through everything a resume does: the manifest
// parser, the header validation, the cross-check of the ranks, verification against the manifest,
// reading the bodies (whole and by overlap), then the directory housekeeping.
#include "fuzz.h"
#include "run/checkpoint.h"
#include "comm/comm.h"

#define FUZZ_SEP "\n==state==\n"

static Comm g_comm;
static int64_t g_lo, g_hi;

static void read_one(const char* name) {
    StateHeader h;
    ckpt_read_state_header(fuzz_path(name), &h);
    size_t n = (size_t)(h.h[SH_END] - h.h[SH_BEGIN]);
    if (1024 + 8 * n > (size_t)1 << 26) abort(); // the size check bounds n by the file size
    float* buf = (float*)malloc(3 * (n ? n : 1) * sizeof(float));
    size_t whole = ckpt_read_state_overlap(fuzz_path(name), &h, (size_t)h.h[SH_BEGIN], (size_t)h.h[SH_END], buf, buf + n, buf + 2 * n);
    if (whole != n) abort();
    size_t b = (size_t)g_lo, e = (size_t)g_hi;
    if (e > b && e - b <= 3 * (n ? n : 1)) {
        float* o = (float*)malloc(3 * (e - b) * sizeof(float));
        size_t got = ckpt_read_state_overlap(fuzz_path(name), &h, b, e, o, o + (e - b), o + 2 * (e - b));
        if (got > e - b || got > n) abort();
        free(o);
    }
    free(buf);
}

static void check_all(void) {
    StateHeader h0;
    ckpt_check_states(g_fuzz_dir, 1, &h0);
    if (h0.h[SH_STEP] != 1 || h0.h[SH_RANK] != 0) abort();
}

static void verify(void) { ckpt_verify(&g_comm, g_fuzz_dir, 1); }

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    comm_init(&g_comm, argc, argv);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_setup();
    const uint8_t *mtext, *rest, *s0, *s1;
    size_t nm, nrest, n0, n1;
    fuzz_split(data, size, FUZZ_SEP, &mtext, &nm, &rest, &nrest);
    fuzz_split(rest, nrest, FUZZ_SEP, &s0, &n0, &s1, &n1);
    CkptManifest mf;
    char err[1024];
    if (ckpt_manifest_parse((const char*)mtext, nm, "DONE", 1, &mf, err, sizeof(err)) == 0) ckpt_manifest_free(&mf);
    g_lo = nm % 257; g_hi = g_lo + (int64_t)(n1 % 311);
    fuzz_write("DONE_00000001", mtext, nm);
    fuzz_write("model_00000001.bin", "m", 1);
    fuzz_write("state_00000001_00000.bin", s0, n0);
    if (n0 < nrest) fuzz_write("state_00000001_00001.bin", s1, n1);
    else fuzz_remove("state_00000001_00001.bin");
    FUZZ_RUN(read_one("state_00000001_00000.bin"));
    if (n0 < nrest) FUZZ_RUN(read_one("state_00000001_00001.bin"));
    FUZZ_RUN(check_all());
    FUZZ_RUN(verify());
    if (ckpt_find_latest(g_fuzz_dir) != 1) abort();
    ckpt_clean(g_fuzz_dir); // must keep nothing it should not: the next input rewrites the files anyway
    ckpt_prune(g_fuzz_dir, 1, -1);
    return 0;
}
