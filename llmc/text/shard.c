#include "text/shard.h"
#include "base/check.h"
#include "base/crc32c.h"
#include "base/fileio.h"
#include <stdlib.h>
#include <string.h>

#define SCAN_CHUNK (1 << 20) // tokens (or mask bytes) read at a time
#define RECREATE "re-create it with data/prepare"

void shard_mask_path(char* out, size_t cap, const char* bin) {
    size_t n = strlen(bin);
    if (n > 4 && strcmp(bin + n - 4, ".bin") == 0) snprintf(out, cap, "%.*s.mask", (int)(n - 4), bin);
    else snprintf(out, cap, "%s.mask", bin);
}

int64_t shard_read_header(const char* path, int magic, int max_version, int elem_bytes, const char* what, int32_t* h) {
    FILE* fp = fopenCheck(path, "rb");
    size_t got = fread(h, sizeof(int32_t), 256, fp);
    fclose(fp);
    if (got != 256) fatal("the file is truncated; " RECREATE, "'%s': too short for a %s header (1024 bytes)", path, what);
    if (h[0] != magic) fatal("is this an llm.c token shard? create shards with data/prepare",
                             "'%s': bad magic %d (expected %d for a %s)", path, h[0], magic, what);
    if (h[1] < 1 || h[1] > max_version)
        fatal("the file was written by an incompatible tool version", "'%s': unsupported %s version %d", path, what, h[1]);
    int64_t n = h[2];
    int64_t size = file_size(path);
    if (n <= 0 || size != SHARD_HEADER_BYTES + n * elem_bytes)
        fatal("the file is truncated or corrupt; " RECREATE,
              "'%s': header says %lld tokens (%lld bytes) but the file has %lld bytes",
              path, (long long)n, (long long)(SHARD_HEADER_BYTES + n * elem_bytes), (long long)size);
    return n;
}

// Fields 3-9 must make sense on their own: a window length whose windows fill the shard, a packed
// flag only with windows, and the set fields all stated (or none).
static void check_fields(const char* path, const int32_t* h, int64_t n) {
    const int W = h[SHARD_WINDOW], packed = h[SHARD_PACKED];
    if (packed != 0 && (packed != 1 || W <= 0))
        fatal("the file is corrupt; " RECREATE, "'%s': header field 4 is %d with a window length of %d", path, packed, W);
    if (W < 0 || (W > 0 && (n - 1) % W != 0))
        fatal("the file is corrupt; " RECREATE, "'%s': %lld tokens do not make windows of %d tokens + 1", path, (long long)n, W);
    if (h[SHARD_HAS_MASK] != 0 && h[SHARD_HAS_MASK] != 1)
        fatal("the file is corrupt; " RECREATE, "'%s': header field 5 (has a loss mask) is %d, not 0 or 1", path, h[SHARD_HAS_MASK]);
    if (h[SHARD_COUNT] < 0 || h[SHARD_COUNT] > (1 << 20) || (h[SHARD_COUNT] == 0 && (h[SHARD_INDEX] || h[SHARD_CRC] || h[SHARD_SET])) ||
        (h[SHARD_COUNT] > 0 && (h[SHARD_INDEX] < 0 || h[SHARD_INDEX] >= h[SHARD_COUNT])))
        fatal("the file is corrupt; " RECREATE, "'%s': header fields 6-9 (shard %d of %d) are inconsistent", path, h[SHARD_INDEX], h[SHARD_COUNT]);
}

// Where header h puts its shard, for messages
static void describe_place(char* out, size_t cap, const int32_t* h) {
    if (!h[SHARD_COUNT]) snprintf(out, cap, "no shard (an older data/prepare's, or another tool's)");
    else snprintf(out, cap, "shard %d of %d (window %d%s), tokens %08x, set %08x", h[SHARD_INDEX] + 1, h[SHARD_COUNT], h[SHARD_WINDOW],
                  h[SHARD_PACKED] ? ", packed" : "", (unsigned)h[SHARD_CRC], (unsigned)h[SHARD_SET]);
}

// The mask beside shard `path` (header h, n tokens), if any: its version (0: none). A shard that
// says it has one must have it; a mask beside a shard written without one, or naming another
// shard, is a leftover of another data/prepare run.
static int open_mask(const char* path, const int32_t* h, int64_t n, const char* mp, int32_t* mh) {
    const int stated = h[SHARD_COUNT] > 0;
    if (!file_exists(mp)) {
        if (h[SHARD_HAS_MASK])
            fatal("copy every .mask file with its .bin, or run data/prepare again (without its mask the shard would train on every token, prompts "
                  "included; to do that on purpose, prepare the data with --train-on-inputs)",
                  "'%s' was written with a loss mask, but its mask '%s' is missing", path, mp);
        if (h[SHARD_PACKED])
            fatal("re-create the shard and its mask together with data/prepare", "'%s' holds packed records but the mask '%s' is missing", path, mp);
        return 0;
    }
    if (stated && !h[SHARD_HAS_MASK])
        fatal("delete it, or run data/prepare again (it removes such leftovers)",
              "'%s' lies beside '%s', which was written without a loss mask: the mask is a leftover of another data/prepare run", mp, path);
    int64_t nm = shard_read_header(mp, MASK_MAGIC, MASK_VERSION_PAIRS, 1, "loss mask", mh);
    check_fields(mp, mh, nm);
    if (nm != n) fatal("re-create the shard and its mask together with data/prepare",
                       "'%s' has %lld mask entries but '%s' has %lld tokens", mp, (long long)nm, path, (long long)n);
    if ((stated || mh[SHARD_COUNT] > 0) && memcmp(h + SHARD_WINDOW, mh + SHARD_WINDOW, (SHARD_SET - SHARD_WINDOW + 1) * sizeof(int32_t)) != 0) {
        char names[160], is[160];
        describe_place(names, sizeof(names), mh);
        describe_place(is, sizeof(is), h);
        fatal("the mask is a leftover of another data/prepare run (or the files were mixed in a copy): run data/prepare again",
              "'%s' does not belong to '%s': it was written for %s; the .bin is %s", mp, path, names, is);
    }
    if (h[SHARD_PACKED] && mh[1] < MASK_VERSION_PACKED)
        fatal("re-create the shard and its mask together with data/prepare",
              "'%s' holds packed records but its mask '%s' is version 1 (it has no record starts)", path, mp);
    if (!h[SHARD_PACKED] && mh[1] >= MASK_VERSION_PACKED)
        fatal("re-create the shard and its mask together with data/prepare",
              "'%s' is a mask of packed records (version %d), but '%s' holds no packed records", mp, mh[1], path);
    if (h[SHARD_PAIRS] && mh[1] != MASK_VERSION_PAIRS)
        fatal("re-create the shard and its mask together with data/prepare",
              "'%s' holds preference pairs but its mask '%s' is version %d (it does not say which records pair up)", path, mp, mh[1]);
    if (!h[SHARD_PAIRS] && mh[1] == MASK_VERSION_PAIRS)
        fatal("re-create the shard and its mask together with data/prepare",
              "'%s' is a mask of preference pairs (version 3), but '%s' does not hold pairs (header field 10)", mp, path);
    return mh[1];
}

// Every token: below vocab_size, and the checksum data/prepare wrote (if it wrote one).
static void scan_tokens(const char* path, const int32_t* h, int64_t n, int vocab_size, uint16_t* buf) {
    FILE* fp = fopenCheck(path, "rb");
    fseekCheck(fp, SHARD_HEADER_BYTES, SEEK_SET, path);
    uint32_t crc = 0;
    int64_t bad = -1;
    int bad_id = 0;
    for (int64_t at = 0; at < n; at += SCAN_CHUNK) {
        const size_t k = (size_t)(n - at < SCAN_CHUNK ? n - at : SCAN_CHUNK);
        freadCheck(buf, sizeof(uint16_t), k, fp, path);
        crc = crc32c(crc, buf, k * sizeof(uint16_t));
        for (size_t i = 0; i < k && bad < 0; i++)
            if ((int)buf[i] >= vocab_size) { bad = at + (int64_t)i; bad_id = buf[i]; }
    }
    fclose(fp);
    if (h[SHARD_COUNT] > 0 && crc != (uint32_t)h[SHARD_CRC])
        fatal("the file is corrupt (changed after data/prepare wrote it); " RECREATE,
              "'%s': the tokens' CRC-32C is %08x, the header says %08x", path, crc, (unsigned)h[SHARD_CRC]);
    if (bad >= 0)
        fatal("the data was tokenized with a different vocabulary than the model's",
              "'%s': token id %d at token %lld (byte offset %lld) is out of range for the model's vocabulary (%d)",
              path, bad_id, (long long)bad, (long long)(SHARD_HEADER_BYTES + 2 * bad), vocab_size);
}

// The order of a pair shard's record starts within a window: a chosen first, each chosen followed
// by its rejected, the padding (a start with neither bit) last. *state: 0 a window's start, 1
// after a chosen, 2 after a rejected, 3 after the padding. Fatal, naming the token, on anything else.
static void pair_order(const char* mp, uint8_t b, int64_t t, int at_window, int* state, int64_t* pairs) {
    if ((b & (MASK_CHOSEN | MASK_REJECTED)) && !(b & MASK_START))
        fatal("the file is corrupt; " RECREATE, "'%s': token %lld is marked as a pair's record without a record start", mp, (long long)t);
    if (at_window && *state == 1)
        fatal("the file is corrupt; " RECREATE, "'%s': the window before token %lld ends with a chosen record without its rejected one", mp, (long long)t);
    if (at_window) *state = 0;
    if (!(b & MASK_START)) return;
    const int kind = b & MASK_CHOSEN ? (b & MASK_REJECTED ? -1 : 1) : b & MASK_REJECTED ? 2 : 3;
    const int ok = kind == 1 ? *state == 0 || *state == 2 : kind == 2 ? *state == 1 : kind == 3 ? *state == 2 : 0;
    if (!ok) fatal("the file is corrupt; " RECREATE, "'%s': the record starting at token %lld breaks the pairs' order (a chosen record, "
                   "its rejected one, ..., then the padding)", mp, (long long)t);
    *state = kind;
    *pairs += kind == 1;
}

// Every mask byte: bit 0 (trained), + bit 1 (a record starts) in a packed shard's, where every
// window starts a record, + bits 2 / 3 (a pair's chosen / rejected record) in a pair shard's;
// the checksum; the trained targets (tokens 1..n-1) and the pairs into si.
static void scan_mask(const char* mp, const int32_t* mh, int version, int64_t n, int W, uint8_t* buf, ShardInfo* si) {
    const int max_byte = version == MASK_VERSION_PAIRS ? 15 : version == MASK_VERSION_PACKED ? MASK_TRAINED | MASK_START : MASK_TRAINED;
    FILE* fp = fopenCheck(mp, "rb");
    fseekCheck(fp, SHARD_HEADER_BYTES, SEEK_SET, mp);
    uint32_t crc = 0;
    int state = 0;
    for (int64_t at = 0; at < n; at += SCAN_CHUNK) {
        const size_t k = (size_t)(n - at < SCAN_CHUNK ? n - at : SCAN_CHUNK);
        freadCheck(buf, 1, k, fp, mp);
        crc = crc32c(crc, buf, k);
        for (size_t i = 0; i < k; i++) {
            const int64_t t = at + (int64_t)i;
            if (buf[i] > max_byte)
                fatal("a loss mask holds one byte per token: 0 (not trained) or 1 (trained), + 2 for a record start in a packed shard's "
                      "(+ 4 / 8 for a pair's chosen / rejected record); " RECREATE,
                      "'%s': mask byte %d at byte offset %lld (token %lld) is not in 0..%d",
                      mp, (int)buf[i], (long long)(SHARD_HEADER_BYTES + t), (long long)t, max_byte);
            const int window = version >= MASK_VERSION_PACKED && t % W == 0 && t < n - 1;
            if (window && !(buf[i] & MASK_START))
                fatal("the file is corrupt; " RECREATE, "'%s': the window at token %lld does not start a record", mp, (long long)t);
            if (version == MASK_VERSION_PAIRS && t < n - 1) pair_order(mp, buf[i], t, window, &state, &si->pairs);
            if (t > 0) si->trained += buf[i] & MASK_TRAINED;
        }
    }
    fclose(fp);
    if (state == 1)
        fatal("the file is corrupt; " RECREATE, "'%s': the last window ends with a chosen record without its rejected one", mp);
    if (mh[SHARD_COUNT] > 0 && crc != (uint32_t)mh[MASK_CRC])
        fatal("the file is corrupt (changed after data/prepare wrote it); " RECREATE,
              "'%s': the mask bytes' CRC-32C is %08x, the header says %08x", mp, crc, (unsigned)mh[MASK_CRC]);
}

void shard_check(const char* path, int vocab_size, ShardInfo* si) {
    memset(si, 0, sizeof(*si));
    const int64_t n = shard_read_header(path, SHARD_MAGIC, SHARD_VERSION, 2, "token shard", si->h);
    check_fields(path, si->h, n);
    if (si->h[SHARD_PAIRS] != 0 && (si->h[SHARD_PAIRS] != 1 || !si->h[SHARD_PACKED] || !si->h[SHARD_HAS_MASK]))
        fatal("the file is corrupt; " RECREATE, "'%s': header field 10 (preference pairs) is %d with field 4 (packed) %d and field 5 (mask) %d",
              path, si->h[SHARD_PAIRS], si->h[SHARD_PACKED], si->h[SHARD_HAS_MASK]);
    char mp[LLMC_PATH_MAX];
    int32_t mh[256];
    shard_mask_path(mp, sizeof(mp), path);
    si->ntok = n;
    si->mask_version = open_mask(path, si->h, n, mp, mh);
    uint16_t* buf = (uint16_t*)mallocCheck(SCAN_CHUNK * sizeof(uint16_t));
    scan_tokens(path, si->h, n, vocab_size, buf);
    si->targets = n - 1;
    if (si->mask_version) scan_mask(mp, mh, si->mask_version, n, si->h[SHARD_WINDOW], (uint8_t*)buf, si);
    else si->trained = si->targets;
    free(buf);
}

// ----------------------------------------------------------------------------------------------
// data/prepare --show

// One token's bytes as a quoted string: printable ASCII as is (and every byte >= 0x80, so UTF-8
// reads), the rest escaped.
static void show_quoted(FILE* out, const char* s, size_t len) {
    fputc('"', out);
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c == '\t') fputs("\\t", out);
        else if (c == '\r') fputs("\\r", out);
        else if (c < 0x20 || c == 0x7f) fprintf(out, "\\x%02x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

static void show_summary(FILE* out, const char* path, const ShardInfo* si, int64_t from, int64_t to, int ids, int color) {
    const int32_t* h = si->h;
    const int W = h[SHARD_WINDOW];
    fprintf(out, "# %s: %lld tokens, ", path, (long long)si->ntok);
    if (W && h[SHARD_PAIRS]) fprintf(out, "%lld preference pairs in windows of %d tokens", (long long)si->pairs, W);
    else if (W) fprintf(out, "%s of %d tokens", h[SHARD_PACKED] ? "records packed into windows" : "one record per window", W);
    else fprintf(out, "a token stream");
    if (h[SHARD_COUNT]) fprintf(out, ", shard %d of %d of its split (set %08x)", h[SHARD_INDEX] + 1, h[SHARD_COUNT], (unsigned)h[SHARD_SET]);
    fprintf(out, "\n");
    if (si->mask_version)
        fprintf(out, "# loss mask: %lld of %lld targets trained (%.1f%%)\n", (long long)si->trained, (long long)si->targets,
                si->targets ? 100.0 * (double)si->trained / (double)si->targets : 0.0);
    else fprintf(out, "# no loss mask: every target is trained\n");
    if (ids) fprintf(out, "# tokens %lld..%lld: position, id, label (the id when trained, -100 when not%s), text\n",
                     (long long)from, (long long)to - 1,
                     h[SHARD_PAIRS] ? "; 'start chosen' / 'start rejected': a pair's records start" : h[SHARD_PACKED] ? "; 'start': a record starts" : "");
    else fprintf(out, "# tokens %lld..%lld as text, trained targets %s\n", (long long)from, (long long)to - 1,
                 color ? "in green" : "between [[ and ]]");
}

// A pair shard's record start at mask byte b: the line before it ("chosen", "rejected", "padding").
static const char* pair_label(uint8_t b) { return b & MASK_CHOSEN ? "chosen" : b & MASK_REJECTED ? "rejected" : "padding"; }

// tok[0..n) (positions from.., of ntok) as text: runs of tokens trained or not, cut at window
// starts and (pairs) at record starts, each of which gets a line saying which record it is
static void show_text(FILE* out, const Tokenizer* tk, const uint16_t* tok, const uint8_t* tr, const uint8_t* mask, int pairs,
                      int64_t from, int64_t n, int64_t ntok, int W, int color) {
    int* ids = (int*)mallocCheck((size_t)n * sizeof(int) + 1);
    int last = '\n';
    for (int64_t i = 0; i < n;) {
        const int64_t p = from + i;
        const int inside = p < ntok - 1; // (the shard's last token closes the last window)
        if (W && p % W == 0 && inside) {
            fprintf(out, "%s# window %lld (tokens %lld..%lld)\n", last == '\n' ? "" : "\n", (long long)(p / W), (long long)p, (long long)(p + W - 1));
            last = '\n';
        }
        if (pairs && inside && (mask[i] & MASK_START)) {
            fprintf(out, "%s# %s\n", last == '\n' ? "" : "\n", pair_label(mask[i]));
            last = '\n';
        }
        int64_t j = i;
        while (j < n && tr[j] == tr[i] && (j == i || ((!W || (from + j) % W != 0) && !(pairs && (mask[j] & MASK_START))))) { ids[j - i] = tok[j]; j++; }
        size_t len;
        char* s = tok_decode(tk, ids, (size_t)(j - i), &len);
        if (tr[i]) fputs(color ? "\033[32m" : "[[", out);
        fwrite(s, 1, len, out);
        if (len) last = (unsigned char)s[len - 1];
        if (tr[i]) fputs(color ? "\033[0m" : "]]", out);
        if (tr[i] && !color) last = ']';
        free(s);
        i = j;
    }
    if (last != '\n') fputc('\n', out);
    free(ids);
}

void shard_show(FILE* out, const char* path, const Tokenizer* tk, int64_t from, int64_t count, int ids, int color) {
    ShardInfo si;
    shard_check(path, tk->vocab_size, &si);
    if (from >= si.ntok) fatal("give --from below the shard's token count", "--from %lld: '%s' has %lld tokens", (long long)from, path, (long long)si.ntok);
    const int64_t to = count > 0 && from + count < si.ntok ? from + count : si.ntok, n = to - from;
    uint16_t* tok = (uint16_t*)mallocCheck((size_t)n * sizeof(uint16_t));
    uint8_t* mask = (uint8_t*)mallocCheck((size_t)n);
    uint8_t* tr = (uint8_t*)mallocCheck((size_t)n);
    FILE* fp = fopenCheck(path, "rb");
    fseekCheck(fp, SHARD_HEADER_BYTES + 2 * from, SEEK_SET, path);
    freadCheck(tok, sizeof(uint16_t), (size_t)n, fp, path);
    fclose(fp);
    if (si.mask_version) {
        char mp[LLMC_PATH_MAX];
        shard_mask_path(mp, sizeof(mp), path);
        fp = fopenCheck(mp, "rb");
        fseekCheck(fp, SHARD_HEADER_BYTES + from, SEEK_SET, mp);
        freadCheck(mask, 1, (size_t)n, fp, mp);
        fclose(fp);
    }
    for (int64_t i = 0; i < n; i++) {
        mask[i] = si.mask_version ? mask[i] : (uint8_t)(from + i > 0);
        tr[i] = (uint8_t)(from + i > 0 && (mask[i] & MASK_TRAINED)); // (token 0 of a shard is never a target)
    }
    show_summary(out, path, &si, from, to, ids, color);
    const int pairs = si.mask_version == MASK_VERSION_PAIRS;
    if (!ids) show_text(out, tk, tok, tr, mask, pairs, from, n, si.ntok, si.h[SHARD_WINDOW], color);
    else for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char* s = tok_token_bytes(tk, tok[i], &len);
        fprintf(out, "%lld\t%d\t%d\t", (long long)(from + i), tok[i], tr[i] ? tok[i] : -100);
        show_quoted(out, s, len);
        if (!si.h[SHARD_PACKED] || !(mask[i] & MASK_START)) fputs("\n", out);
        else if (pairs) fprintf(out, "\tstart %s\n", pair_label(mask[i]));
        else fputs("\tstart\n", out);
    }
    free(tok); free(mask); free(tr);
}
