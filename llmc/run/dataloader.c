#include "run/dataloader.h"
#include "base/check.h"
#include "base/fileio.h"
#include "base/rand.h"
#include <glob.h>
#include <string.h>
#include <stdlib.h>

static void dl_permute(int64_t* a, int64_t n, int shuffle, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) a[i] = i;
    if (!shuffle) return;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rand_u64(seed, 0, (uint64_t)i) % (uint64_t)(i + 1));
        int64_t t = a[i]; a[i] = a[j]; a[j] = t;
    }
}

static int64_t dl_chunk_tokens(const DataLoader* dl) { return (int64_t)dl->world * dl->B * dl->T; }
static int64_t dl_nchunks(const DataLoader* dl, int64_t shard) {
    // the last token of a chunk is only read as a target, so a chunk needs chunk_tokens + 1
    return (dl->ntok[shard] - 1) / dl_chunk_tokens(dl);
}

static void mask_path(char* out, size_t cap, const char* bin) {
    size_t n = strlen(bin);
    if (n > 4 && strcmp(bin + n - 4, ".bin") == 0) snprintf(out, cap, "%.*s.mask", (int)(n - 4), bin);
    else snprintf(out, cap, "%s.mask", bin);
}

// The header h (256 int32) of a shard or mask file of versions 1..max_version, checked against the
// file's size; returns the token count.
static int64_t read_header(const char* path, int magic, int max_version, int elem_bytes, const char* what, int32_t* h) {
    FILE* fp = fopenCheck(path, "rb");
    size_t got = fread(h, sizeof(int32_t), 256, fp);
    fclose(fp);
    if (got != 256) fatal("the file is truncated; re-create it with data/prepare", "'%s': too short for a %s header (1024 bytes)", path, what);
    if (h[0] != magic) fatal("is this an llm.c token shard? create shards with data/prepare",
                             "'%s': bad magic %d (expected %d for a %s)", path, h[0], magic, what);
    if (h[1] < 1 || h[1] > max_version)
        fatal("the file was written by an incompatible tool version", "'%s': unsupported %s version %d", path, what, h[1]);
    int64_t n = h[2];
    int64_t size = file_size(path);
    if (n <= 0 || size != 1024 + n * elem_bytes)
        fatal("the file is truncated or corrupt; re-create it with data/prepare",
              "'%s': header says %lld tokens (%lld bytes) but the file has %lld bytes",
              path, (long long)n, (long long)(1024 + n * elem_bytes), (long long)size);
    return n;
}

// data/prepare --record-windows T (one record per window) and --pack T (records packed into
// windows) write windows of T tokens (+ one closing token) and keep T in header field 3 (0: one
// token stream), --pack a 1 in field 4. Batches start at multiples of T, so the windows stay whole
// exactly when the model trains with --seq-len T.
static void dl_check_window(const char* path, const int32_t* h, int64_t ntok, int T) {
    const int W = h[SHARD_WINDOW], packed = h[SHARD_PACKED];
    if (packed != 0 && (packed != 1 || W <= 0))
        fatal("the file is corrupt; re-create it with data/prepare", "'%s': header field 4 is %d with a window length of %d", path, packed, W);
    if (W == 0) return;
    if (W < 0 || (ntok - 1) % W != 0)
        fatal("the file is corrupt; re-create it with data/prepare", "'%s': %lld tokens do not make windows of %d tokens + 1",
              path, (long long)ntok, W);
    if (W != T && packed)
        fatal("train with --seq-len equal to the pack length, or prepare the data again with --pack set to your --seq-len",
              "'%s' holds records packed into windows of %d tokens (data/prepare --pack %d), but --seq-len is %d", path, W, W, T);
    if (W != T)
        fatal("train with --seq-len equal to the window length, or prepare the data again with --record-windows set to your --seq-len",
              "'%s' holds one record per window of %d tokens (data/prepare --record-windows %d), but --seq-len is %d",
              path, W, W, T);
}

// Shard i's loss mask, if it has one: its version in has_mask[i]. A packed shard needs a version 2
// mask (the record starts), and only a packed one may have it.
static void dl_open_mask(DataLoader* dl, int i) {
    char mp[LLMC_PATH_MAX];
    int32_t h[256];
    mask_path(mp, sizeof(mp), dl->files[i]);
    if (file_exists(mp)) {
        int64_t nm = read_header(mp, MASK_MAGIC, 2, 1, "loss mask", h);
        if (nm != dl->ntok[i]) fatal("re-create the shard and its mask together with data/prepare",
                                     "'%s' has %lld mask entries but '%s' has %lld tokens",
                                     mp, (long long)nm, dl->files[i], (long long)dl->ntok[i]);
        dl->has_mask[i] = h[1];
    }
    if (dl->shard_packed[i] && dl->has_mask[i] != 2)
        fatal("re-create the shard and its mask together with data/prepare",
              "'%s' holds packed records but %s '%s' %s", dl->files[i], dl->has_mask[i] ? "its mask" : "the mask",
              mp, dl->has_mask[i] ? "is version 1 (it has no record starts)" : "is missing");
    if (!dl->shard_packed[i] && dl->has_mask[i] == 2)
        fatal("re-create the shard and its mask together with data/prepare",
              "'%s' is a mask of packed records (version 2), but '%s' holds no packed records", mp, dl->files[i]);
}

void dl_init(DataLoader* dl, const char* pattern, int B, int T, int rank, int world,
             int vocab_size, int shuffle, uint64_t seed) {
    memset(dl, 0, sizeof(*dl));
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world;
    dl->vocab_size = vocab_size; dl->shuffle = shuffle; dl->seed = seed;
    // expand comma-separated globs
    char* pat = strdup(pattern);
    int cap = 0;
    for (char* save = NULL, *tok = strtok_r(pat, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        glob_t g;
        int rc = glob(tok, 0, NULL, &g);
        if (rc != 0 || g.gl_pathc == 0)
            fatal("check the path; create token shards with data/prepare", "no data files match '%s'", tok);
        for (size_t i = 0; i < g.gl_pathc; i++) {
            if (dl->n_files == cap) { cap = cap ? 2 * cap : 16; dl->files = (char**)realloc(dl->files, (size_t)cap * sizeof(char*)); }
            dl->files[dl->n_files++] = strdup(g.gl_pathv[i]);
        }
        globfree(&g);
    }
    free(pat);
    dl->ntok = (int64_t*)callocCheck((size_t)dl->n_files, sizeof(int64_t));
    dl->has_mask = (int*)callocCheck((size_t)dl->n_files, sizeof(int));
    dl->shard_packed = (int*)callocCheck((size_t)dl->n_files, sizeof(int));
    for (int i = 0; i < dl->n_files; i++) {
        int32_t h[256];
        dl->ntok[i] = read_header(dl->files[i], SHARD_MAGIC, 1, 2, "token shard", h);
        dl_check_window(dl->files[i], h, dl->ntok[i], T);
        dl->shard_packed[i] = h[SHARD_PACKED];
        dl->packed |= h[SHARD_PACKED];
        dl_open_mask(dl, i);
        if (dl_nchunks(dl, i) < 1)
            fatal("use a smaller --batch-size / --seq-len (or fewer ranks), or more data",
                  "'%s' has %lld tokens, fewer than one global batch needs (%d ranks x %d x %d + 1 = %lld)",
                  dl->files[i], (long long)dl->ntok[i], world, B, T, (long long)(dl_chunk_tokens(dl) + 1));
        if (dl_nchunks(dl, i) > dl->max_chunks) dl->max_chunks = dl_nchunks(dl, i);
        dl->total_tokens += dl->ntok[i];
    }
    dl->shard_order = (int64_t*)mallocCheck((size_t)dl->n_files * sizeof(int64_t));
    dl->chunk_order = (int64_t*)mallocCheck((size_t)dl->max_chunks * sizeof(int64_t));
    dl->tok_buf = (uint16_t*)mallocCheck(((size_t)B * T + 1) * sizeof(uint16_t));
    dl->mask_buf = (uint8_t*)mallocCheck((size_t)B * T + 1);
    dl_reset(dl);
}

// Recompute the permutations for the current state (cheap; done on shard change and restore).
static void dl_refresh_orders(DataLoader* dl) {
    dl_permute(dl->shard_order, dl->n_files, dl->shuffle, dl->seed ^ (0x5851F42D4C957F2Dull * (uint64_t)(dl->st.epoch + 1)));
    int64_t shard = dl->shard_order[dl->st.shard_i];
    dl_permute(dl->chunk_order, dl_nchunks(dl, shard), dl->shuffle,
               dl->seed ^ (0x14057B7EF767814Full * (uint64_t)(dl->st.epoch + 1)) ^ (uint64_t)(shard + 1) * 0xD1B54A32D192ED03ull);
}

void dl_reset(DataLoader* dl) {
    dl->st.epoch = 0; dl->st.shard_i = 0; dl->st.chunk_i = 0;
    dl_refresh_orders(dl);
}

DataLoaderState dl_get_state(const DataLoader* dl) { return dl->st; }

void dl_set_state(DataLoader* dl, DataLoaderState st) {
    if (st.epoch < 0 || st.shard_i < 0 || st.shard_i >= dl->n_files)
        fatal("resume with the same --train-data as the checkpointed run", "data loader state does not fit the data files");
    dl->st = st;
    dl_refresh_orders(dl);
    if (st.chunk_i < 0 || st.chunk_i >= dl_nchunks(dl, dl->shard_order[st.shard_i]))
        fatal("resume with the same --train-data, --batch-size, --seq-len and rank count as the checkpointed run",
              "data loader state does not fit the data files");
}

int64_t dl_batches_per_epoch(const DataLoader* dl) {
    int64_t n = 0;
    for (int i = 0; i < dl->n_files; i++) n += dl_nchunks(dl, i);
    return n;
}

// The record starts of the batch's windows (a packed shard: from the mask's bit 1; every window
// starts a record, or the file is corrupt), or 0 everywhere.
static void dl_doc_starts(const DataLoader* dl, int64_t shard, int64_t start, const char* mp, int* doc_start) {
    const int T = dl->T, N = dl->B * dl->T;
    if (!dl->shard_packed[shard]) { memset(doc_start, 0, (size_t)N * sizeof(int)); return; }
    for (int i = 0; i < N; i++) {
        const int t = i % T, first = dl->mask_buf[i] & MASK_START;
        if (t == 0 && !first)
            fatal("the file is corrupt; re-create it with data/prepare", "'%s': the window at token %lld does not start a record",
                  mp, (long long)(start + i));
        doc_start[i] = t == 0 ? 0 : first ? t : doc_start[i - 1];
    }
}

void dl_next(DataLoader* dl, int* inputs, int* targets, int* doc_start) {
    if (dl->packed && !doc_start) fatal("this is a bug in llmc", "dl_next of packed records without doc_start");
    int64_t shard = dl->shard_order[dl->st.shard_i];
    int64_t chunk = dl->chunk_order[dl->st.chunk_i];
    const size_t n = (size_t)dl->B * dl->T + 1;
    int64_t start = chunk * dl_chunk_tokens(dl) + (int64_t)dl->rank * dl->B * dl->T;
    const char* path = dl->files[shard];
    FILE* fp = fopenCheck(path, "rb");
    fseekCheck(fp, 1024 + start * 2, SEEK_SET, path);
    freadCheck(dl->tok_buf, sizeof(uint16_t), n, fp, path);
    fclose(fp);
    if (dl->has_mask[shard]) {
        char mp[LLMC_PATH_MAX];
        mask_path(mp, sizeof(mp), path);
        FILE* mf = fopenCheck(mp, "rb");
        fseekCheck(mf, 1024 + start, SEEK_SET, mp);
        freadCheck(dl->mask_buf, 1, n, mf, mp);
        fclose(mf);
        const int max_byte = dl->has_mask[shard] == 2 ? MASK_TRAINED | MASK_START : MASK_TRAINED;
        for (size_t i = 0; i < n; i++)
            if (dl->mask_buf[i] > max_byte)
                fatal("a loss mask holds one byte per token: 0 (not trained) or 1 (trained), + 2 for a record start in a packed shard's; "
                      "re-create it with data/prepare",
                      "'%s': mask byte %d at byte offset %lld (token %lld) is not in 0..%d",
                      mp, (int)dl->mask_buf[i], (long long)(1024 + start + (int64_t)i), (long long)(start + (int64_t)i), max_byte);
        if (doc_start) dl_doc_starts(dl, shard, start, mp, doc_start);
    } else if (doc_start) memset(doc_start, 0, (n - 1) * sizeof(int));
    for (size_t i = 0; i < n; i++) {
        if ((int)dl->tok_buf[i] >= dl->vocab_size)
            fatal("the data was tokenized with a different vocabulary than the model's",
                  "'%s': token id %d at token %lld is out of range for the model's vocabulary (%d)",
                  path, (int)dl->tok_buf[i], (long long)(start + (int64_t)i), dl->vocab_size);
    }
    for (size_t i = 0; i + 1 < n; i++) {
        inputs[i] = dl->tok_buf[i];
        int keep = !dl->has_mask[shard] || (dl->mask_buf[i + 1] & MASK_TRAINED);
        targets[i] = keep ? (int)dl->tok_buf[i + 1] : -1;
    }
    // advance
    dl->st.chunk_i++;
    if (dl->st.chunk_i >= dl_nchunks(dl, shard)) {
        dl->st.chunk_i = 0;
        dl->st.shard_i++;
        if (dl->st.shard_i >= dl->n_files) { dl->st.shard_i = 0; dl->st.epoch++; }
        dl_refresh_orders(dl);
    }
}

void dl_free(DataLoader* dl) {
    for (int i = 0; i < dl->n_files; i++) free(dl->files[i]);
    free(dl->files); free(dl->ntok); free(dl->has_mask); free(dl->shard_packed); free(dl->shard_order); free(dl->chunk_order);
    free(dl->tok_buf); free(dl->mask_buf);
    memset(dl, 0, sizeof(*dl));
}
