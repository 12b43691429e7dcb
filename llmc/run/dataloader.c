#include "run/dataloader.h"
#include "text/shard.h"
#include "base/check.h"
#include "base/fileio.h"
#include "base/rand.h"
#include "base/crc32c.h"
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <string.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

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
    // the last token of a chunk is only read as a target, so a chunk needs chunk_tokens + 1;
    // evaluation also reads what is left after the last whole chunk
    const int64_t c = dl_chunk_tokens(dl), targets = dl->ntok[shard] - 1;
    return dl->partial ? (targets + c - 1) / c : targets / c;
}

// Windows (data/prepare --record-windows T / --pack T, header field 3) stay whole exactly when the
// model trains with --seq-len T: batches start at multiples of it.
static void dl_check_window(const char* path, const int32_t* h, int T) {
    const int W = h[SHARD_WINDOW];
    if (W == 0 || W == T) return;
    if (h[SHARD_PACKED])
        fatal("train with --seq-len equal to the pack length, or prepare the data again with --pack set to your --seq-len",
              "'%s' holds records packed into windows of %d tokens (data/prepare --pack %d), but --seq-len is %d", path, W, W, T);
    fatal("train with --seq-len equal to the window length, or prepare the data again with --record-windows set to your --seq-len",
          "'%s' holds one record per window of %d tokens (data/prepare --record-windows %d), but --seq-len is %d", path, W, W, T);
}

// The files of a pattern: comma-separated globs, in order; glob_of[i] is 1 where file i was
// matched by a wildcard (not named as it is).
static void dl_expand(DataLoader* dl, const char* pattern, int** glob_of) {
    char* pat = strdup(pattern);
    int cap = 0;
    for (char* save = NULL, *tok = strtok_r(pat, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        glob_t g;
        int rc = glob(tok, 0, NULL, &g);
        if (rc != 0 || g.gl_pathc == 0)
            fatal("check the path; create token shards with data/prepare", "no data files match '%s'", tok);
        const int wild = strpbrk(tok, "*?[") != NULL;
        for (size_t i = 0; i < g.gl_pathc; i++) {
            if (dl->n_files == cap) {
                cap = cap ? 2 * cap : 16;
                dl->files = (char**)realloc(dl->files, (size_t)cap * sizeof(char*));
                *glob_of = (int*)realloc(*glob_of, (size_t)cap * sizeof(int));
                if (!dl->files || !*glob_of) fatal(NULL, "out of memory listing '%s'", pattern);
            }
            (*glob_of)[dl->n_files] = wild;
            dl->files[dl->n_files++] = strdup(g.gl_pathv[i]);
        }
        globfree(&g);
    }
    free(pat);
}

// Where shard k of the set that file `path` (shard `have` of it) belongs would be: the same name
// with its six digits replaced, if it has data/prepare's NAME_SPLIT_NNNNNN.bin form.
static int dl_sibling_name(char* out, size_t cap, const char* path, int have, int k) {
    const size_t n = strlen(path);
    char digits[16];
    snprintf(digits, sizeof(digits), "%06d.bin", have);
    if (n < 11 || strcmp(path + n - 10, digits) != 0) return 0;
    snprintf(out, cap, "%.*s%06d.bin", (int)(n - 10), path, k);
    return 1;
}

// A wildcard that matched part of a data/prepare output: every shard of the set must be there.
// What an interrupted data/prepare leaves (shards not yet written, or old shards of an earlier
// run with the same name not yet replaced or removed) fails here, with the file named. Each set
// is looked at once (done[]).
static void dl_check_sets(const DataLoader* dl, const int32_t (*hs)[10], const int* glob_of) {
    char* seen = NULL;
    char* done = (char*)callocCheck((size_t)dl->n_files, 1);
    for (int i = 0; i < dl->n_files; i++) {
        const int32_t* h = hs[i];
        if (done[i] || !glob_of[i] || h[SHARD_COUNT] == 0) continue;
        seen = (char*)realloc(seen, (size_t)h[SHARD_COUNT]);
        if (!seen) fatal(NULL, "out of memory checking '%s'", dl->pattern);
        memset(seen, 0, (size_t)h[SHARD_COUNT]);
        for (int j = 0; j < dl->n_files; j++)
            if (hs[j][SHARD_SET] == h[SHARD_SET] && hs[j][SHARD_COUNT] == h[SHARD_COUNT]) { seen[hs[j][SHARD_INDEX]] = 1; done[j] = 1; }
        int k = 0;
        while (k < h[SHARD_COUNT] && seen[k]) k++;
        if (k == h[SHARD_COUNT]) continue;
        char sib[LLMC_PATH_MAX + 16];
        int named = dl_sibling_name(sib, sizeof(sib), dl->files[i], h[SHARD_INDEX], k), other = 0;
        for (int j = 0; named && j < dl->n_files; j++) other |= strcmp(dl->files[j], sib) == 0; // (then of another set)
        const char* hint = "run data/prepare again (an interrupted data/prepare leaves such a folder); to train on part of a set on purpose, name its files one by one, separated by commas";
        if (other)
            fatal(hint, "'%s' is shard %d of %d of a data/prepare output (set %08x), but '%s' in its place belongs to another one: '%s' mixes two data/prepare runs",
                  dl->files[i], h[SHARD_INDEX] + 1, h[SHARD_COUNT], (unsigned)h[SHARD_SET], sib, dl->pattern);
        fatal(hint, "'%s' is shard %d of %d of a data/prepare output (set %08x), but shard %d%s%s%s is not among the files '%s' matches",
              dl->files[i], h[SHARD_INDEX] + 1, h[SHARD_COUNT], (unsigned)h[SHARD_SET], k + 1,
              named ? " ('" : "", named ? sib : "", named ? "')" : "", dl->pattern);
    }
    free(seen); free(done);
}

// ---- the shards' files, read by descriptor: the data the loader checked when it opened them
//
// A descriptor is opened before the file is checked and compared with the path after (the same
// file: device, inode, size, modification time), so what was checked is what it reads. Kept open,
// it goes on reading the file it checked when data/prepare replaces the file (by rename: the
// replaced file's data lives while a descriptor holds it). Descriptors are kept while the
// process's open-file limit leaves DL_FD_RESERVE free for everything else (its soft limit raised
// toward the hard one as needed); the shards beyond are opened by path for each batch and must
// still be the file that was checked, or the run stops naming it.
#define DL_FD_RESERVE 256
static int dl_fds_kept; // descriptors the process's loaders hold

static int dl_same_file(const struct stat* a, const struct stat* b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

// Whether two more descriptors may be kept (raising the soft limit when the hard one allows).
static int dl_fd_room(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    const rlim_t need = (rlim_t)dl_fds_kept + 2 + DL_FD_RESERVE;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need && (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need)) {
        rl.rlim_cur = need + 1024 < rl.rlim_max ? need + 1024 : rl.rlim_max; // (in steps: not one call a shard)
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    }
    return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need;
}

static void dl_changed(const char* path) {
    fatal("leave the data as it is while a run trains on it (prepare new data into another --out-dir); resume from the newest checkpoint "
          "with the files the run started with",
          "'%s' changed during the run (replaced or rewritten after the loader checked it)", path);
}

// path opened, its identity in *st; fatal, naming it, when it cannot be.
static int dl_open_fd(const char* path, struct stat* st) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, st) != 0)
        fatal("check the path and its permissions", "cannot open '%s': %s", path, strerror(errno));
    return fd;
}

// A descriptor of file k of shard i (k 0: tokens, 1: mask) for a read: the kept one, or the path
// opened again, which must be the file that was checked (the caller closes it: dl_put_fd).
static int dl_get_fd(const DataLoader* dl, int i, int k, const char* path) {
    if (dl->fds[2 * i + k] >= 0) return dl->fds[2 * i + k];
    struct stat st;
    const int fd = dl_open_fd(path, &st);
    if (!dl_same_file(&st, &dl->ident[2 * i + k])) dl_changed(path);
    return fd;
}
static void dl_put_fd(const DataLoader* dl, int i, int k, int fd) { if (dl->fds[2 * i + k] < 0) close(fd); }

// n bytes at offset off of file k of shard i; fatal, naming it, on a short read (a file cut since).
static void dl_pread(const DataLoader* dl, int i, int k, const char* path, void* buf, size_t n, int64_t off) {
    const int fd = dl_get_fd(dl, i, k, path);
    size_t got = 0;
    while (got < n) {
        const ssize_t r = pread(fd, (char*)buf + got, n - got, (off_t)(off + (int64_t)got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) dl_changed(path);
        got += (size_t)r;
    }
    dl_put_fd(dl, i, k, fd);
}

// Shard i's files (k 0: the tokens, 1: the mask, if there is one) opened before shard_check reads
// them by path ...
static void dl_open_fds(DataLoader* dl, int i, const char* const* paths) {
    dl->fds[2 * i] = dl->fds[2 * i + 1] = -1;
    for (int k = 0; k < 2; k++)
        if (k == 0 || file_exists(paths[1])) dl->fds[2 * i + k] = dl_open_fd(paths[k], &dl->ident[2 * i + k]);
}

// ... and after it, still the files at those paths (what it checked), then kept while there is room.
static void dl_keep_fds(DataLoader* dl, int i, const char* const* paths, int has_mask) {
    if (has_mask && dl->fds[2 * i + 1] < 0) dl_changed(paths[1]); // (a mask that came during the check)
    for (int k = 0; k < 2; k++) {
        int* fd = &dl->fds[2 * i + k];
        if (*fd < 0) continue;
        struct stat now;
        if (stat(paths[k], &now) != 0 || !dl_same_file(&now, &dl->ident[2 * i + k])) dl_changed(paths[k]);
        if (dl_fd_room()) { dl_fds_kept++; continue; }
        close(*fd);
        *fd = -1;
    }
}

// Shard i: checked whole (llmc/text/shard.h), its window length against T, its batches.
static void dl_open_shard(DataLoader* dl, int i, int32_t* fields) {
    ShardInfo si;
    char mp[LLMC_PATH_MAX];
    shard_mask_path(mp, sizeof(mp), dl->files[i]);
    const char* paths[2] = { dl->files[i], mp };
    dl_open_fds(dl, i, paths);
    shard_check(dl->files[i], dl->vocab_size, &si);
    dl_keep_fds(dl, i, paths, si.mask_version != 0);
    dl_check_window(dl->files[i], si.h, dl->T);
    memcpy(fields, si.h, 10 * sizeof(int32_t));
    dl->ntok[i] = si.ntok;
    dl->has_mask[i] = si.mask_version;
    dl->shard_packed[i] = si.h[SHARD_PACKED];
    dl->packed |= si.h[SHARD_PACKED];
    if (i > 0 && dl->pairs != (si.mask_version == MASK_VERSION_PAIRS))
        fatal("prepare preference pairs and other records as separate data sets, and give one of them",
              "'%s' %s preference pairs, but '%s' %s: '%s' mixes them", dl->files[i], dl->pairs ? "does not hold" : "holds",
              dl->files[0], dl->pairs ? "does" : "does not", dl->pattern);
    dl->pairs = si.mask_version == MASK_VERSION_PAIRS;
    dl->n_pairs += si.pairs;
    const int64_t id[5] = { si.ntok, si.h[SHARD_CRC], si.h[SHARD_SET], si.h[SHARD_PAIRS], si.pairs };
    dl->data_id = crc32c(dl->data_id, id, sizeof(id));
    dl->n_masked += si.mask_version != 0;
    dl->targets += si.targets;
    dl->trained += si.trained;
    if (dl_nchunks(dl, i) < 1)
        fatal("use a smaller --batch-size / --seq-len (or fewer ranks), or more data",
              "'%s' has %lld tokens, fewer than one global batch needs (%d ranks x %d x %d + 1 = %lld)",
              dl->files[i], (long long)dl->ntok[i], dl->world, dl->B, dl->T, (long long)(dl_chunk_tokens(dl) + 1));
    if (dl->partial && (dl->ntok[i] - 1) % dl_chunk_tokens(dl) != 0) dl->n_partial++;
    if (dl_nchunks(dl, i) > dl->max_chunks) dl->max_chunks = dl_nchunks(dl, i);
    dl->total_tokens += dl->ntok[i];
}

// Pairs are numbered through the files in order, and in each file window by window: for every
// window, the pairs before it (the chosen starts in the mask; shard_check checked their order).
static void dl_index_pairs(DataLoader* dl) {
    dl->pair_base = (int64_t*)callocCheck((size_t)dl->n_files, sizeof(int64_t));
    dl->win_pairs = (int64_t**)callocCheck((size_t)dl->n_files, sizeof(int64_t*));
    uint8_t* buf = (uint8_t*)mallocCheck((size_t)dl->T);
    int64_t base = 0;
    for (int i = 0; i < dl->n_files; i++) {
        const int64_t nwin = (dl->ntok[i] - 1) / dl->T;
        char mp[LLMC_PATH_MAX];
        shard_mask_path(mp, sizeof(mp), dl->files[i]);
        dl->pair_base[i] = base;
        dl->win_pairs[i] = (int64_t*)mallocCheck((size_t)(nwin + 1) * sizeof(int64_t));
        int64_t k = 0;
        for (int64_t w = 0; w < nwin; w++) {
            dl->win_pairs[i][w] = k;
            dl_pread(dl, i, 1, mp, buf, (size_t)dl->T, SHARD_HEADER_BYTES + w * dl->T);
            for (int t = 0; t < dl->T; t++) k += (buf[t] & MASK_CHOSEN) != 0;
        }
        dl->win_pairs[i][nwin] = k;
        base += k;
    }
    free(buf);
}

static void dl_open(DataLoader* dl, const char* pattern, int B, int T, int rank, int world,
                    int vocab_size, int shuffle, uint64_t seed, int partial) {
    memset(dl, 0, sizeof(*dl));
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world;
    dl->vocab_size = vocab_size; dl->shuffle = shuffle; dl->seed = seed; dl->partial = partial;
    dl->pattern = strdup(pattern);
    int* glob_of = NULL;
    dl_expand(dl, pattern, &glob_of);
    dl->fds = (int*)mallocCheck((size_t)dl->n_files * 2 * sizeof(int));
    dl->ident = (struct stat*)callocCheck((size_t)dl->n_files * 2, sizeof(struct stat));
    dl->ntok = (int64_t*)callocCheck((size_t)dl->n_files, sizeof(int64_t));
    dl->has_mask = (int*)callocCheck((size_t)dl->n_files, sizeof(int));
    dl->shard_packed = (int*)callocCheck((size_t)dl->n_files, sizeof(int));
    int32_t (*fields)[10] = (int32_t (*)[10])callocCheck((size_t)dl->n_files, sizeof(*fields));
    for (int i = 0; i < dl->n_files; i++) dl_open_shard(dl, i, fields[i]);
    dl_check_sets(dl, (const int32_t (*)[10])fields, glob_of);
    if (dl->pairs) dl_index_pairs(dl);
    free(fields); free(glob_of);
    dl->shard_order = (int64_t*)mallocCheck((size_t)dl->n_files * sizeof(int64_t));
    dl->chunk_order = (int64_t*)mallocCheck((size_t)dl->max_chunks * sizeof(int64_t));
    dl->tok_buf = (uint16_t*)mallocCheck(((size_t)B * T + 1) * sizeof(uint16_t));
    dl->mask_buf = (uint8_t*)mallocCheck((size_t)B * T + 1);
    dl_reset(dl);
}

void dl_init(DataLoader* dl, const char* pattern, int B, int T, int rank, int world,
             int vocab_size, int shuffle, uint64_t seed) {
    dl_open(dl, pattern, B, T, rank, world, vocab_size, shuffle, seed, 0);
}

void dl_init_eval(DataLoader* dl, const char* pattern, int B, int T, int rank, int world, int vocab_size) {
    dl_open(dl, pattern, B, T, rank, world, vocab_size, 0, 0, 1);
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
// starts a record, or the file is corrupt), or 0 everywhere. Rows past the end of a partial
// batch (no target in them) are 0 too.
static void dl_doc_starts(const DataLoader* dl, int64_t shard, int64_t start, size_t got, const char* mp, int* doc_start) {
    const int T = dl->T, N = dl->B * dl->T;
    if (!dl->shard_packed[shard]) { memset(doc_start, 0, (size_t)N * sizeof(int)); return; }
    for (int i = 0; i < N; i++) {
        const int t = i % T, first = dl->mask_buf[i] & MASK_START;
        if ((size_t)(i - t) + 1 >= got) { doc_start[i] = 0; continue; }
        if (t == 0 && !first)
            fatal("the file is corrupt; re-create it with data/prepare", "'%s': the window at token %lld does not start a record",
                  mp, (long long)(start + i));
        doc_start[i] = t == 0 ? 0 : first ? t : doc_start[i - 1];
    }
}

// This rank's tokens (and mask bytes) of the batch at `start`: B*T + 1 of them, or in a partial
// evaluation batch those the shard has (the rest: token 0, mask 0). Returns how many were read.
// (shard_check read them all when the loader opened the shard, and they are read from the files
// it checked; the range checks here guard against a file rewritten in place.)
static size_t dl_read(DataLoader* dl, int64_t shard, int64_t start, char* mp) {
    const size_t n = (size_t)dl->B * dl->T + 1;
    const int64_t avail = dl->ntok[shard] - start;
    const size_t got = avail >= (int64_t)n ? n : avail > 0 ? (size_t)avail : 0;
    const char* path = dl->files[shard];
    memset(dl->tok_buf + got, 0, (n - got) * sizeof(uint16_t));
    memset(dl->mask_buf + got, 0, n - got);
    if (got) dl_pread(dl, (int)shard, 0, path, dl->tok_buf, got * sizeof(uint16_t), SHARD_HEADER_BYTES + start * 2);
    for (size_t i = 0; i < got; i++)
        if ((int)dl->tok_buf[i] >= dl->vocab_size)
            fatal("the data was tokenized with a different vocabulary than the model's",
                  "'%s': token id %d at token %lld is out of range for the model's vocabulary (%d)",
                  path, (int)dl->tok_buf[i], (long long)(start + (int64_t)i), dl->vocab_size);
    if (!dl->has_mask[shard] || !got) return got;
    shard_mask_path(mp, LLMC_PATH_MAX, path);
    dl_pread(dl, (int)shard, 1, mp, dl->mask_buf, got, SHARD_HEADER_BYTES + start);
    const int max_byte = dl->has_mask[shard] == MASK_VERSION_PAIRS ? 15 : dl->has_mask[shard] == MASK_VERSION_PACKED ? MASK_TRAINED | MASK_START
                                                                                                     : MASK_TRAINED;
    for (size_t i = 0; i < got; i++)
        if (dl->mask_buf[i] > max_byte)
            fatal("a loss mask holds one byte per token: 0 (not trained) or 1 (trained), + 2 for a record start in a packed shard's "
                  "(+ 4 / 8 for a pair's chosen / rejected record); re-create it with data/prepare",
                  "'%s': mask byte %d at byte offset %lld (token %lld) is not in 0..%d",
                  mp, (int)dl->mask_buf[i], (long long)(SHARD_HEADER_BYTES + start + (int64_t)i), (long long)(start + (int64_t)i), max_byte);
    return got;
}

// The batch of this rank (dl_next's outputs), without the check of what the shards hold.
static void dl_next_batch(DataLoader* dl, int* inputs, int* targets, int* doc_start) {
    if (dl->packed && !doc_start) fatal("this is a bug in llmc", "dl_next of packed records without doc_start");
    int64_t shard = dl->shard_order[dl->st.shard_i];
    int64_t chunk = dl->chunk_order[dl->st.chunk_i];
    const size_t n = (size_t)dl->B * dl->T + 1;
    int64_t start = chunk * dl_chunk_tokens(dl) + (int64_t)dl->rank * dl->B * dl->T;
    char mp[LLMC_PATH_MAX];
    const size_t got = dl_read(dl, shard, start, mp);
    dl->last_shard = shard; dl->last_start = start; dl->last_got = (int64_t)got;
    if (doc_start) dl_doc_starts(dl, shard, start, got, mp, doc_start);
    for (size_t i = 0; i + 1 < n; i++) {
        inputs[i] = dl->tok_buf[i];
        int keep = i + 1 < got && (!dl->has_mask[shard] || (dl->mask_buf[i + 1] & MASK_TRAINED));
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

void dl_next(DataLoader* dl, int* inputs, int* targets, int* doc_start) {
    if (dl->pairs)
        fatal("train preference pairs with a preference objective (--objective dpo, ipo, orpo or simpo), or prepare {\"prompt\", "
              "\"completion\"} records for supervised fine-tuning",
              "'%s' holds preference pairs: a supervised step would train the rejected completions too", dl->pattern);
    dl_next_batch(dl, inputs, targets, doc_start);
}

int dl_max_pairs(const DataLoader* dl) { return dl->B * dl->T / 4 + 1; }

// The positions [s, e) of a record whose targets are trained (mask bit 0 of the token after):
// one run at the record's end, its completion and stop. Fatal if there is none, or two runs.
static void dl_completion(const DataLoader* dl, int s, int e, int* a, int* b) {
    *a = *b = -1;
    for (int p = s; p < e; p++) {
        if (!(dl->mask_buf[p + 1] & MASK_TRAINED)) continue;
        if (*a < 0) *a = p;
        else if (*b != p)
            fatal("the file is corrupt; re-create it with data/prepare", "'%s': the record at token %lld trains two separate runs of tokens",
                  dl->files[dl->last_shard], (long long)(dl->last_start + s));
        *b = p + 1;
    }
    if (*a < 0)
        fatal("the file is corrupt; re-create it with data/prepare", "'%s': the pair's record at token %lld trains no token",
              dl->files[dl->last_shard], (long long)(dl->last_start + s));
}

void dl_next_pref(DataLoader* dl, int* inputs, int* targets, int* doc_start, PrefPair* pairs, int64_t* ids, int* n_pairs) {
    if (!dl->pairs) fatal("prepare the data from {\"prompt\", \"chosen\", \"rejected\"} records (data/README.md)",
                          "'%s' holds no preference pairs", dl->pattern);
    dl_next_batch(dl, inputs, targets, doc_start);
    // the whole windows read (a partial evaluation batch has fewer than B): the token after the
    // last of them, the shard's closing token, is the next window's first, and may be marked as
    // a chosen record's start whose record is in no file
    const int T = dl->T, N = dl->last_got > 0 ? (int)((dl->last_got - 1) / T) * T : 0;
    const int64_t shard = dl->last_shard, wfirst = dl->last_start / T;
    int n = 0, k = 0, open = 0;
    for (int i = 0; i < N; i++) {
        if (i % T == 0) k = 0; // (pairs so far in this window)
        const uint8_t m = dl->mask_buf[i];
        if (!(m & (MASK_CHOSEN | MASK_REJECTED))) continue;
        int e = i + 1;
        while (e % T != 0 && !(dl->mask_buf[e] & MASK_START)) e++;
        int a, b;
        dl_completion(dl, i, e, &a, &b);
        if ((m & MASK_CHOSEN) ? open || n == dl_max_pairs(dl) : !open || i / T != pairs[n].c_first / T)
            fatal("the file is corrupt; re-create it with data/prepare", "'%s': the record at token %lld is out of its pair's order",
                  dl->files[shard], (long long)(dl->last_start + i)); // (shard_check checked the order)
        if (m & MASK_CHOSEN) {
            pairs[n].c_first = i; pairs[n].c_begin = a; pairs[n].c_end = b;
            ids[n] = dl->pair_base[shard] + dl->win_pairs[shard][wfirst + i / T] + k++;
            open = 1;
            continue;
        }
        pairs[n].r_begin = a; pairs[n].r_end = b;
        open = 0;
        n++;
    }
    *n_pairs = n;
}

void dl_describe(const DataLoader* train, const DataLoader* val, char* out, size_t cap) {
    const double pct = train->targets ? 100.0 * (double)train->trained / (double)train->targets : 0.0;
    char masks[128];
    if (train->n_masked == 0) snprintf(masks, sizeof(masks), "loss masks: off");
    else if (train->n_masked == train->n_files) snprintf(masks, sizeof(masks), "loss masks: on (%.1f%% of tokens trained)", pct);
    else snprintf(masks, sizeof(masks), "loss masks: on for %d of %d files (%.1f%% of tokens trained)", train->n_masked, train->n_files, pct);
    int k = snprintf(out, cap, "%s (%lld tokens, %lld batches/epoch) | %s", train->pattern, (long long)train->total_tokens,
                     (long long)dl_batches_per_epoch(train), masks);
    if (train->pairs && k >= 0 && (size_t)k < cap) k += snprintf(out + k, cap - (size_t)k, " | %lld preference pairs", (long long)train->n_pairs);
    if (!val || k < 0 || (size_t)k >= cap) return;
    k += snprintf(out + k, cap - (size_t)k, " | val: %s", val->pattern);
    const long long nb = (long long)dl_batches_per_epoch(val), np = (long long)val->n_partial;
    if (!np || (size_t)k >= cap) return;
    if (nb == 1) snprintf(out + k, cap - (size_t)k, " (1 batch, partial: each target counts once)");
    else if (np == 1) snprintf(out + k, cap - (size_t)k, " (%lld batches, one partial: each target counts once)", nb);
    else snprintf(out + k, cap - (size_t)k, " (%lld batches, %lld of them partial: each target counts once)", nb, np);
}

void dl_free(DataLoader* dl) {
    for (int i = 0; dl->fds && i < 2 * dl->n_files; i++)
        if (dl->fds[i] >= 0) { close(dl->fds[i]); dl_fds_kept--; }
    free(dl->fds); free(dl->ident);
    for (int i = 0; i < dl->n_files; i++) free(dl->files[i]);
    free(dl->files); free(dl->ntok); free(dl->has_mask); free(dl->shard_packed); free(dl->shard_order); free(dl->chunk_order);
    free(dl->tok_buf); free(dl->mask_buf); free(dl->pattern);
    for (int i = 0; dl->win_pairs && i < dl->n_files; i++) free(dl->win_pairs[i]);
    free(dl->win_pairs); free(dl->pair_base);
    memset(dl, 0, sizeof(*dl));
}
