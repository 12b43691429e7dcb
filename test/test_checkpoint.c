// Checkpoint integrity (llmc/run/checkpoint.h, llmc/base/crc32c.h):
//  - CRC-32C against the published check value ("123456789" -> e3069283, the CRC catalogue) and
//    the iSCSI test vectors of RFC 3720 appendix B.4; the hardware path equals the table path on
//    every length and alignment, and pieces chain;
//  - the DONE manifest round-trips and every malformed one is refused with a message;
//  - every state header field out of range is refused naming the field, including the crafted
//    1,152-byte file whose size check overflowed int64 before (UBSan in the SAN=1 run);
//  - the headers of all ranks are cross-checked (rank, step, settings, shard ranges);
//  - ckpt_verify refuses a flipped byte, a truncated, a missing file, naming it;
//  - ckpt_clean removes what PENDING markers name and temporaries of the files a run writes, and
//    nothing else: not a complete checkpoint, not a user's files with checkpoint names;
//  - ckpt_prune removes every rank's files of a pruned step, never the protected step.
#include "test.h"
#include "test_child.h"
#include "run/checkpoint.h"
#include "base/crc32c.h"
#include "base/fileio.h"
#include "comm/comm.h"
#include <stdint.h>
#include <unistd.h>
#include <sys/stat.h>

static char g_dir[256];
static Comm g_comm;

static void test_crc(void) {
    TEST_CHECK(crc32c(0, "123456789", 9) == 0xE3069283u, "check value %08x", crc32c(0, "123456789", 9));
    unsigned char b[48];
    memset(b, 0, 32);
    TEST_CHECK(crc32c(0, b, 32) == 0x8A9136AAu, "32 zeros: %08x", crc32c(0, b, 32));
    memset(b, 0xFF, 32);
    TEST_CHECK(crc32c(0, b, 32) == 0x62A8AB43u, "32 x ff: %08x", crc32c(0, b, 32));
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)i;
    TEST_CHECK(crc32c(0, b, 32) == 0x46DD794Eu, "0..31: %08x", crc32c(0, b, 32));
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)(31 - i);
    TEST_CHECK(crc32c(0, b, 32) == 0x113FDB5Cu, "31..0: %08x", crc32c(0, b, 32));
    // RFC 3720 B.4: an iSCSI read command PDU
    static const unsigned char pdu[48] = {
        0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
        0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00 };
    TEST_CHECK(crc32c(0, pdu, 48) == 0xD9963A56u, "iSCSI PDU: %08x", crc32c(0, pdu, 48));
    TEST_CHECK(crc32c_sw(0, pdu, 48) == 0xD9963A56u, "table path, iSCSI PDU");
    // the two paths agree on every length and alignment, and pieces chain
    unsigned char buf[1100];
    for (size_t i = 0; i < sizeof(buf); i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
    int bad = 0;
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 1090; n += (n < 64 ? 1 : 37)) {
            uint32_t a = crc32c(0, buf + off, n), s = crc32c_sw(0, buf + off, n);
            uint32_t chained = crc32c(crc32c(0, buf + off, n / 3), buf + off + n / 3, n - n / 3);
            if (a != s || a != chained) bad++;
        }
    TEST_CHECK(bad == 0, "%d length/alignment cases differ between paths or pieces", bad);
    printf("ok   crc32c: check value, RFC 3720 vectors, hardware (%s) == table path, chaining\n",
           crc32c_hw_available() ? "SSE4.2" : "absent");
    // a file's checksum is the checksum of its bytes
    char path[512];
    snprintf(path, sizeof(path), "%s/crc.bin", g_dir);
    atomic_write_file(path, buf, sizeof(buf));
    uint64_t size; uint32_t crc;
    crc32c_file(path, &size, &crc);
    TEST_CHECK(size == sizeof(buf) && crc == crc32c(0, buf, sizeof(buf)), "file_crc32c");
}

// ---------------------------------------------------------------------------------------------
// a small checkpoint: `world` ranks, ZeRO-1 shards of `total` elements when world > 1

static void make_header(StateHeader* h, int world, int rank, long step, int64_t total) {
    memset(h, 0, sizeof(*h));
    int64_t shard = (total + world - 1) / world;
    h->h[SH_MAGIC] = STATE_MAGIC; h->h[SH_VERSION] = STATE_VERSION;
    h->h[SH_WORLD] = world; h->h[SH_RANK] = rank; h->h[SH_HAS_MASTER] = 0;
    h->h[SH_STEP] = step; h->h[SH_OPT_T] = step - 1; h->h[SH_SKIPPED] = 1;
    h->h[SH_DL_EPOCH] = 0; h->h[SH_DL_SHARD] = 0; h->h[SH_DL_CHUNK] = 3;
    h->h[SH_BEGIN] = world == 1 ? 0 : rank * shard;
    h->h[SH_END] = world == 1 ? total : ((rank + 1) * shard < total ? (rank + 1) * shard : total);
    h->h[SH_TOTAL] = total; h->h[SH_MODE] = 0; h->h[SH_B] = 2; h->h[SH_T] = 16; h->h[SH_ACCUM] = 2;
    h->h[SH_ZERO] = world > 1; h->h[SH_SEED] = 1337; h->h[SH_TOKENS_PER_STEP] = 2 * 16 * world * 2; h->h[SH_SHUFFLE] = 0;
}

static void write_state_file(const char* dir, const StateHeader* h, long step, int rank) {
    size_t n = (size_t)(h->h[SH_END] - h->h[SH_BEGIN]);
    float* m = (float*)calloc(n + 1, sizeof(float));
    float* v = (float*)calloc(n + 1, sizeof(float));
    for (size_t i = 0; i < n; i++) { m[i] = 0.001f * (float)i; v[i] = 1e-6f * (float)i; }
    char path[600];
    ckpt_path(path, sizeof(path), dir, "state", step, rank);
    ckpt_write_state(path, h, m, v, NULL);
    free(m); free(v);
}

// Writes model + states of `world` ranks and commits them (single process: the manifest by hand).
static void make_checkpoint(const char* dir, int world, long step, int64_t total) {
    mkdir_p(dir);
    char path[600];
    ckpt_path(path, sizeof(path), dir, "model", step, 0);
    char model[2000];
    for (size_t i = 0; i < sizeof(model); i++) model[i] = (char)(i * 7);
    atomic_write_file(path, model, sizeof(model));
    CkptManifest mf = { step, world, world + 1, (CkptFile*)calloc((size_t)world + 1, sizeof(CkptFile)) };
    for (int q = 0; q <= world; q++) {
        if (q > 0) { StateHeader h; make_header(&h, world, q - 1, step, total); write_state_file(dir, &h, step, q - 1); }
        ckpt_name(mf.files[q].name, sizeof(mf.files[q].name), q ? "state" : "model", step, q - 1);
        path_join(path, sizeof(path), dir, mf.files[q].name);
        crc32c_file(path, &mf.files[q].bytes, &mf.files[q].crc);
    }
    ckpt_manifest_write(dir, &mf);
    ckpt_manifest_free(&mf);
}

// ---------------------------------------------------------------------------------------------
// manifest

static void test_manifest(void) {
    char dir[400];
    snprintf(dir, sizeof(dir), "%s/mf", g_dir);
    make_checkpoint(dir, 2, 7, 1000);
    CkptManifest mf;
    char err[1024];
    TEST_CHECK(ckpt_manifest_try_read(dir, 7, &mf, err, sizeof(err)) == 0, "valid manifest refused: %s", err);
    TEST_CHECK(mf.world == 2 && mf.nfiles == 3 && !strcmp(mf.files[0].name, "model_00000007.bin") &&
               !strcmp(mf.files[2].name, "state_00000007_00001.bin") && mf.files[0].bytes == 2000, "manifest contents");
    ckpt_manifest_free(&mf);
    TEST_CHECK(ckpt_manifest_try_read(dir, 8, &mf, err, sizeof(err)) != 0 && strstr(err, "missing"), "absent marker: %s", err);
    const char* ok = "{\"format\": \"llmc-ft checkpoint\", \"version\": 1, \"step\": 7, \"world\": 1, \"files\": ["
                     "{\"name\": \"adapter_00000007/adapter_model.safetensors\", \"bytes\": 5, \"crc32c\": \"0000abcd\"},"
                     "{\"name\": \"state_00000007_00000.bin\", \"bytes\": 1032, \"crc32c\": \"ffffffff\"}]}";
    TEST_CHECK(ckpt_manifest_parse(ok, strlen(ok), "x", 7, &mf, err, sizeof(err)) == 0 && mf.files[0].crc == 0xabcd, "adapter manifest: %s", err);
    ckpt_manifest_free(&mf);
    struct { const char* text; const char* msg; } bad[] = {
        { "", "empty" },
        { "{\"format\": \"llmc-ft checkpoint\", \"version\": 1, \"step\": 7, \"world\": 1, \"files\": [", "invalid JSON" },
        { "[]", "not a JSON object" },
        { "{\"format\": \"other\", \"version\": 1, \"step\": 7, \"world\": 1, \"files\": []}", "format" },
        { "{\"format\": \"llmc-ft checkpoint\", \"version\": 2, \"step\": 7, \"world\": 1, \"files\": []}", "version" },
        { "{\"format\": \"llmc-ft checkpoint\", \"version\": 1, \"step\": 8, \"world\": 1, \"files\": []}", "\"step\"" },
        { "{\"format\": \"llmc-ft checkpoint\", \"version\": 1, \"step\": 7, \"world\": 0, \"files\": []}", "\"world\"" },
        { "{\"format\": \"llmc-ft checkpoint\", \"version\": 1, \"step\": 7, \"world\": 2, \"files\": [{}, {}]}", "must list 3 files" },
        { "{\"format\": \"llmc-ft checkpoint\", \"version\": 1, \"step\": 7, \"world\": 1, \"files\": ["
          "{\"name\": \"model_00000006.bin\", \"bytes\": 5, \"crc32c\": \"0000abcd\"},"
          "{\"name\": \"state_00000007_00000.bin\", \"bytes\": 1032, \"crc32c\": \"ffffffff\"}]}", "not the model or adapter of step 7" },
        { "{\"format\": \"llmc-ft checkpoint\", \"version\": 1, \"step\": 7, \"world\": 1, \"files\": ["
          "{\"name\": \"model_00000007.bin\", \"bytes\": 5, \"crc32c\": \"0000abcd\"},"
          "{\"name\": \"state_00000007_00001.bin\", \"bytes\": 1032, \"crc32c\": \"ffffffff\"}]}", "not the state file of its rank" },
        { "{\"format\": \"llmc-ft checkpoint\", \"version\": 1, \"step\": 7, \"world\": 1, \"files\": ["
          "{\"name\": \"model_00000007.bin\", \"bytes\": -5, \"crc32c\": \"0000abcd\"},"
          "{\"name\": \"state_00000007_00000.bin\", \"bytes\": 1032, \"crc32c\": \"ffffffff\"}]}", "\"bytes\"" },
        { "{\"format\": \"llmc-ft checkpoint\", \"version\": 1, \"step\": 7, \"world\": 1, \"files\": ["
          "{\"name\": \"model_00000007.bin\", \"bytes\": 5, \"crc32c\": \"0000ABCD\"},"
          "{\"name\": \"state_00000007_00000.bin\", \"bytes\": 1032, \"crc32c\": \"ffffffff\"}]}", "crc32c" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = ckpt_manifest_parse(bad[i].text, strlen(bad[i].text), "DONE_x", 7, &mf, err, sizeof(err));
        TEST_CHECK(rc != 0 && strstr(err, bad[i].msg) && strstr(err, "DONE_x"), "manifest %zu: rc %d, message '%s', wanted '%s'", i, rc, err, bad[i].msg);
        if (rc == 0) ckpt_manifest_free(&mf);
    }
    printf("ok   manifest round trip and %zu malformed manifests refused\n", sizeof(bad) / sizeof(bad[0]));
}

// ---------------------------------------------------------------------------------------------
// state headers

typedef struct { char path[600]; char dir[400]; long step; } PathArg;

static void child_read_header(void* arg) {
    StateHeader h;
    ckpt_read_state_header(((PathArg*)arg)->path, &h);
}

static void child_check_states(void* arg) {
    StateHeader h;
    ckpt_check_states(((PathArg*)arg)->dir, ((PathArg*)arg)->step, &h);
}

// Writes raw header words + body bytes to a.path.
static void write_raw(PathArg* a, const StateHeader* h, size_t body) {
    FILE* fp = fopen(a->path, "wb");
    fwrite(h->h, sizeof(int64_t), 128, fp);
    for (size_t i = 0; i < body; i++) fputc(0, fp);
    fclose(fp);
}

static void test_headers(void) {
    PathArg a;
    snprintf(a.path, sizeof(a.path), "%s/hdr.bin", g_dir);
    StateHeader h;
    make_header(&h, 1, 0, 5, 100);
    write_state_file(g_dir, &h, 5, 0);
    ckpt_path(a.path, sizeof(a.path), g_dir, "state", 5, 0);
    StateHeader back;
    ckpt_read_state_header(a.path, &back);
    TEST_CHECK(memcmp(&back, &h, sizeof(h)) == 0, "valid header reads back");

    // The 1,152-byte file of issue 14: begin 0, end = total = 2^62 with master weights. The old
    // size check computed 1024 + n * 4 * 3 in int64 and overflowed.
    StateHeader x;
    make_header(&x, 1, 0, 5, 100);
    x.h[SH_HAS_MASTER] = 1; x.h[SH_END] = x.h[SH_TOTAL] = (int64_t)1 << 62;
    snprintf(a.path, sizeof(a.path), "%s/crafted.bin", g_dir);
    write_raw(&a, &x, 128);
    TEST_CHECK(file_size(a.path) == 1152, "crafted file size");
    const char* want_total[] = { "crafted.bin", "total", "out of range", NULL };
    TEST_CHECK(test_expect_fatal("1,152-byte state file with end = total = 2^62", child_read_header, &a, want_total), "crafted file");

    // one field at a time out of its range; the message names the field
    struct { StateField f; int64_t v; const char* name; } cases[] = {
        { SH_WORLD, 0, "world" }, { SH_RANK, 1, "rank" }, { SH_HAS_MASTER, 2, "has_master" }, { SH_STEP, -1, "step" },
        { SH_OPT_T, 9, "opt_t" }, { SH_SKIPPED, -1, "skipped" }, { SH_DL_EPOCH, -1, "dl_epoch" }, { SH_DL_CHUNK, -4, "dl_chunk" },
        { SH_BEGIN, -1, "begin" }, { SH_END, 101, "end" }, { SH_TOTAL, 0, "total" }, { SH_MODE, 3, "mode" },
        { SH_B, 0, "batch_size" }, { SH_T, -16, "seq_len" }, { SH_ACCUM, 0, "accum" }, { SH_ZERO, 4, "zero" },
        { SH_SEED, -1, "seed" }, { SH_SHUFFLE, 2, "shuffle" }, { SH_TOKENS_PER_STEP, 65, "tokens per step" },
        { SH_OPT_T, 3, "updates" }, { (StateField)100, 1, "header word 100" }, { SH_END, INT64_MAX, "end" },
        { SH_BEGIN, INT64_MIN, "begin" }, { SH_ACCUM, INT64_MAX, "accum" }, { SH_DL_CHUNK, 67108864, "dl_chunk" },
        { SH_NO_TARGETS, -1, "no_targets" }, { SH_NO_TARGETS, 1, "steps without targets" }, { SH_VAL_TRACKED, 2, "val_tracked" },
        { SH_BEST_STEP, 3, "best_step" }, { SH_EVALS_SINCE_BEST, 7, "evals_since_best" }, { SH_BEST_VAL_BITS, 1, "best_val_bits" },
    };
    snprintf(a.path, sizeof(a.path), "%s/field.bin", g_dir);
    int nok = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        StateHeader y = h;
        y.h[cases[i].f] = cases[i].v;
        write_raw(&a, &y, 800);
        const char* want[] = { "field.bin", cases[i].name, NULL };
        char out[8192];
        int rc = test_run_child(child_read_header, &a, out, sizeof(out));
        int good = rc == 1 && strstr(out, want[0]) && strstr(out, want[1]) && !strstr(out, "runtime error");
        TEST_CHECK(good, "field %s = %lld: exit %d, %s", cases[i].name, (long long)cases[i].v, rc, out);
        nok += good;
    }
    printf("ok   %d out-of-range header fields refused, each named\n", nok);
    StateHeader z = h;
    write_raw(&a, &z, 799); // one byte short of 100 elements x 2 x 4 bytes
    const char* want_size[] = { "field.bin", "has 1823 bytes, expected 1824", NULL };
    TEST_CHECK(test_expect_fatal("state file one byte short", child_read_header, &a, want_size), "short state");
}

// Rank 1's header of a 2-rank checkpoint changed one way or another (files rewritten, manifest not
// involved: ckpt_check_states reads the headers).
static void test_cross_check(void) {
    PathArg a;
    snprintf(a.dir, sizeof(a.dir), "%s/xc", g_dir);
    a.step = 4;
    make_checkpoint(a.dir, 2, 4, 1000);
    StateHeader h0;
    ckpt_check_states(a.dir, 4, &h0);
    TEST_CHECK(h0.h[SH_RANK] == 0 && h0.h[SH_WORLD] == 2, "consistent 2-rank checkpoint accepted");
    struct { StateField f; int64_t v; const char* msg; } cases[] = {
        { SH_RANK, 0, "holds the state of rank 0" },
        { SH_DL_CHUNK, 4, "dl_chunk = 4, but rank 0's" },
        { SH_SHUFFLE, 1, "shuffle = 1, but rank 0's" },
        { SH_SEED, 7, "seed = 7" },
        { SH_BEGIN, 499, "does not continue the other ranks' ranges" },
        { SH_END, 999, "does not continue" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        StateHeader h;
        make_header(&h, 2, 1, 4, 1000);
        h.h[cases[i].f] = cases[i].v;
        write_state_file(a.dir, &h, 4, 1);
        const char* want[] = { "state_00000004_00001.bin", cases[i].msg, NULL };
        TEST_CHECK(test_expect_fatal(cases[i].msg, child_check_states, &a, want), "cross-check %zu", i);
    }
    // a 1-rank state file where the manifest lists 2 ranks
    StateHeader h;
    make_header(&h, 1, 0, 4, 1000);
    write_state_file(a.dir, &h, 4, 0);
    const char* want[] = { "state_00000004_00000.bin", "1-rank run", "lists 2 ranks", NULL };
    TEST_CHECK(test_expect_fatal("rank 0 of another world", child_check_states, &a, want), "world mismatch");
}

// ---------------------------------------------------------------------------------------------
// verification against the manifest

static void child_verify(void* arg) { ckpt_verify(&g_comm, ((PathArg*)arg)->dir, ((PathArg*)arg)->step); }

static void flip_byte(const char* path, long off) {
    FILE* fp = fopen(path, "r+b");
    fseek(fp, off, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, off, SEEK_SET);
    fputc(c ^ 0x10, fp);
    fclose(fp);
}

static void test_verify(void) {
    PathArg a;
    snprintf(a.dir, sizeof(a.dir), "%s/vf", g_dir);
    make_checkpoint(a.dir, 2, 3, 1000);
    make_checkpoint(a.dir, 2, 6, 1000);
    a.step = 6;
    ckpt_verify(&g_comm, a.dir, 6);
    printf("ok   intact checkpoint verifies\n");
    char p[600];
    ckpt_path(p, sizeof(p), a.dir, "model", 6, 0);
    flip_byte(p, 1500);
    const char* want_model[] = { "model_00000006.bin", "checksum mismatch", "delete", "DONE_00000006", "step 3", NULL };
    TEST_CHECK(test_expect_fatal("one flipped bit in the model", child_verify, &a, want_model), "flipped model");
    flip_byte(p, 1500);
    ckpt_path(p, sizeof(p), a.dir, "state", 6, 1);
    flip_byte(p, 40); // the header's step field
    const char* want_hdr[] = { "state_00000006_00001.bin", "checksum mismatch", NULL };
    TEST_CHECK(test_expect_fatal("flipped state header (step field)", child_verify, &a, want_hdr), "flipped state header");
    flip_byte(p, 40);
    TEST_CHECK(truncate(p, file_size(p) - 4) == 0, "truncate");
    const char* want_trunc[] = { "state_00000006_00001.bin", "bytes, but", "records", NULL };
    TEST_CHECK(test_expect_fatal("truncated state file", child_verify, &a, want_trunc), "truncated state");
    unlink(p);
    const char* want_missing[] = { "state_00000006_00001.bin", "is missing", NULL };
    TEST_CHECK(test_expect_fatal("missing state file", child_verify, &a, want_missing), "missing state");
    ckpt_path(p, sizeof(p), a.dir, "DONE", 6, 0);
    atomic_write_file(p, "", 0);
    const char* want_empty[] = { "DONE_00000006", "empty", NULL };
    TEST_CHECK(test_expect_fatal("empty DONE marker (no checksums)", child_verify, &a, want_empty), "empty marker");
}

// ---------------------------------------------------------------------------------------------
// leftovers and pruning

static int exists_in(const char* dir, const char* name) {
    char p[600];
    path_join(p, sizeof(p), dir, name);
    return file_exists(p);
}

static void touch(const char* dir, const char* name) {
    char p[600];
    path_join(p, sizeof(p), dir, name);
    FILE* fp = fopen(p, "wb");
    fputs("x", fp);
    fclose(fp);
}

static void mkdir_in(const char* dir, const char* name) {
    char p[600];
    path_join(p, sizeof(p), dir, name);
    mkdir_p(p);
}

// How many of the names are in dir (files or directories).
static int count_present(const char* dir, const char* const* names, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        char p[600];
        path_join(p, sizeof(p), dir, names[i]);
        k += file_exists(p) || dir_exists(p);
    }
    return k;
}

// ckpt_clean removes what the save protocol's own record (PENDING_ markers) and temporaries of
// the files a run writes name, and nothing else: files that merely look like a checkpoint's (a
// user's model_00005000.bin or adapter_00000450/ kept in --out) stay (issue 29, item 1).
static void test_clean(const char* dir) {
    char merged[500];
    make_checkpoint(dir, 1, 2, 100);
    make_checkpoint(dir, 2, 4, 100);
    snprintf(merged, sizeof(merged), "%s/merged", dir);
    mkdir_p(merged);
    // an interrupted save of step 6 (its record, its files) and temporaries of atomic writes
    const char* junk[] = { "PENDING_00000006", "model_00000006.bin", "state_00000006_00001.bin", "model_00000006.bin.tmp.4242",
                           "state_00000006_00000.bin.tmp.17", "DONE_00000006.tmp.99", "run_config.json.tmp.3" };
    for (int i = 0; i < 7; i++) touch(dir, junk[i]);
    touch(merged, "model.safetensors.tmp.5");
    touch(merged, "config.json");
    // a complete checkpoint whose record was not yet removed (killed right after its DONE)
    touch(dir, "PENDING_00000004");
    // what is not the protocol's: a user's files with checkpoint names, no record of them
    mkdir_in(dir, "adapter_00000450");
    char adir[600];
    path_join(adir, sizeof(adir), dir, "adapter_00000450");
    touch(adir, "adapter_model.safetensors");
    const char* mine[] = { "model_00005000.bin", "state_00000008_00000.bin", "state_00000004_00002.bin", "notes.txt.tmp.12", "log.jsonl",
                           "model_0000001.bin.tmp.7x" };
    for (int i = 0; i < 6; i++) touch(dir, mine[i]);
    ckpt_clean(dir);
    TEST_CHECK(count_present(dir, junk, 7) == 0, "%d of 7 leftovers of the interrupted save remain", count_present(dir, junk, 7));
    TEST_CHECK(!exists_in(merged, "model.safetensors.tmp.5") && exists_in(merged, "config.json"), "merged/ temporaries");
    TEST_CHECK(count_present(dir, mine, 6) == 6 && exists_in(adir, "adapter_model.safetensors"),
               "files that only look like a checkpoint's are kept: %d of 6", count_present(dir, mine, 6));
    const char* keep[] = { "DONE_00000002", "model_00000002.bin", "state_00000002_00000.bin", "DONE_00000004",
                           "model_00000004.bin", "state_00000004_00000.bin", "state_00000004_00001.bin" };
    TEST_CHECK(count_present(dir, keep, 7) == 7 && !exists_in(dir, "PENDING_00000004"), "complete checkpoints kept, the stale record of step 4 removed");
    ckpt_verify(&g_comm, dir, 2);
    ckpt_verify(&g_comm, dir, 4);
    printf("ok   ckpt_clean: what PENDING markers name and our temporaries removed; a user's model_00005000.bin, adapter_00000450/ and "
           "other files kept; complete checkpoints intact\n");
}

static void test_clean_and_prune(void) {
    char dir[400];
    snprintf(dir, sizeof(dir), "%s/cl", g_dir);
    test_clean(dir);
    // prune: keep 1 but protect step 2 (the newest one known good): both stay; then step 2 goes
    ckpt_prune(dir, 1, 2);
    TEST_CHECK(exists_in(dir, "DONE_00000002") && exists_in(dir, "model_00000002.bin"), "the protected step 2 survives pruning");
    ckpt_prune(dir, 1, -1);
    TEST_CHECK(!exists_in(dir, "DONE_00000002") && !exists_in(dir, "model_00000002.bin") && !exists_in(dir, "state_00000002_00000.bin") &&
               !exists_in(dir, "PENDING_00000002"), "prune step 2");
    // a 2-rank step 4 goes when a newer one comes, with both ranks' files; the user's files stay
    make_checkpoint(dir, 1, 8, 100);
    ckpt_prune(dir, 1, -1);
    TEST_CHECK(!exists_in(dir, "state_00000004_00000.bin") && !exists_in(dir, "state_00000004_00001.bin") && !exists_in(dir, "model_00000004.bin") &&
               exists_in(dir, "state_00000008_00000.bin") && ckpt_find_latest(dir) == 8 && exists_in(dir, "model_00005000.bin"),
               "prune removes every rank of step 4");
    ckpt_remove(dir, 8);
    TEST_CHECK(ckpt_find_latest(dir) == -1 && !exists_in(dir, "model_00000008.bin") && !exists_in(dir, "PENDING_00000008"), "ckpt_remove");
    printf("ok   ckpt_prune removes every file of a pruned step, whatever its number of ranks, never the protected one\n");
}

int main(int argc, char** argv) {
    comm_init(&g_comm, &argc, &argv);
    snprintf(g_dir, sizeof(g_dir), "%s/llmc-ckpt.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 2; }
    test_crc();
    test_manifest();
    test_headers();
    test_cross_check();
    test_verify();
    test_clean_and_prune();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    comm_finalize(&g_comm);
    return test_finish("test_checkpoint");
}
