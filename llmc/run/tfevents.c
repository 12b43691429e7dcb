#define _GNU_SOURCE
#include "run/tfevents.h"
#include "base/check.h"
#include "base/crc32c.h"
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint32_t tfevents_masked_crc(const void* data, size_t n) {
    const uint32_t c = crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// ---- protobuf encoding: a cursor that stops writing (and says so) once out is full

typedef struct {
    uint8_t* p;
    size_t n, cap;
    int full;
} PbOut;

static void pb_bytes(PbOut* o, const void* b, size_t n) {
    if (o->full || n > o->cap - o->n) { o->full = 1; return; }
    memcpy(o->p + o->n, b, n);
    o->n += n;
}

static void pb_varint(PbOut* o, uint64_t v) {
    uint8_t b[10];
    size_t k = 0;
    do {
        b[k] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) b[k] |= 0x80;
        k++;
    } while (v);
    pb_bytes(o, b, k);
}

static void pb_fixed(PbOut* o, uint64_t v, int bytes) { // little-endian
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    pb_bytes(o, b, (size_t)bytes);
}

static void pb_key(PbOut* o, int field, int wire) { pb_varint(o, ((uint64_t)field << 3) | (uint64_t)wire); }

static void pb_string(PbOut* o, int field, const char* s) {
    const size_t n = strlen(s);
    pb_key(o, field, 2);
    pb_varint(o, n);
    pb_bytes(o, s, n);
}

// Summary.Value {1 tag, 2 simple_value}, encoded on its own first: its length precedes it.
static void pb_value(PbOut* o, const TfValue* v) {
    uint8_t tmp[TFEVENTS_MAX_TAG + 16];
    PbOut in = {tmp, 0, sizeof(tmp), 0};
    uint32_t bits;
    memcpy(&bits, &v->value, 4);
    pb_string(&in, 1, v->tag);
    pb_key(&in, 2, 5);
    pb_fixed(&in, bits, 4);
    pb_key(o, 1, 2);
    pb_varint(o, in.n);
    pb_bytes(o, tmp, in.n);
}

size_t tfevents_encode_event(const TfEvent* e, uint8_t* out, size_t cap) {
    PbOut o = {out, 0, cap, 0};
    if (e->wall_time != 0.0) { // (proto3: default values are not written)
        uint64_t bits;
        memcpy(&bits, &e->wall_time, 8);
        pb_key(&o, 1, 1);
        pb_fixed(&o, bits, 8);
    }
    if (e->step != 0) {
        pb_key(&o, 2, 0);
        pb_varint(&o, (uint64_t)e->step); // (int64: a negative step takes ten bytes, as protobuf writes it)
    }
    if (e->file_version[0]) pb_string(&o, 3, e->file_version);
    if (e->nvalues > 0) { // the Summary encoded on its own first: its length precedes it
        uint8_t sum[TFEVENTS_MAX_VALUES * (TFEVENTS_MAX_TAG + 16)];
        PbOut so = {sum, 0, sizeof(sum), 0};
        for (int i = 0; i < e->nvalues; i++) pb_value(&so, &e->values[i]);
        if (so.full) return TFEVENTS_NO_FIT;
        pb_key(&o, 5, 2);
        pb_varint(&o, so.n);
        pb_bytes(&o, sum, so.n);
    }
    if (e->source_writer[0]) { // SourceMetadata {1 writer}
        const size_t n = strlen(e->source_writer);
        pb_key(&o, 10, 2);
        pb_varint(&o, 1 + 1 + n); // (its key, its length (< 128), the name)
        pb_string(&o, 1, e->source_writer);
    }
    return o.full ? TFEVENTS_NO_FIT : o.n;
}

// ---- protobuf decoding

typedef struct {
    const uint8_t* p;
    size_t n, pos;
    int bad;
} PbIn;

static uint64_t pb_read_varint(PbIn* in) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (in->pos >= in->n) break;
        const uint8_t b = in->p[in->pos++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    in->bad = 1;
    return 0;
}

static uint64_t pb_read_fixed(PbIn* in, int bytes) {
    uint64_t v = 0;
    if (in->n - in->pos < (size_t)bytes) { in->bad = 1; return 0; }
    for (int i = 0; i < bytes; i++) v |= (uint64_t)in->p[in->pos + (size_t)i] << (8 * i);
    in->pos += (size_t)bytes;
    return v;
}

// A length-delimited field's bytes (pointer and length); NULL when the length runs past the end.
static const uint8_t* pb_read_bytes(PbIn* in, size_t* len) {
    const uint64_t n = pb_read_varint(in);
    if (in->bad || n > in->n - in->pos) { in->bad = 1; return NULL; }
    const uint8_t* b = in->p + in->pos;
    in->pos += (size_t)n;
    *len = (size_t)n;
    return b;
}

// Skips a field of a wire type this reader does not look into.
static void pb_skip(PbIn* in, int wire) {
    size_t len;
    if (wire == 0) pb_read_varint(in);
    else if (wire == 1) pb_read_fixed(in, 8);
    else if (wire == 2) pb_read_bytes(in, &len);
    else if (wire == 5) pb_read_fixed(in, 4);
    else in->bad = 1;
}

static int pb_copy_string(char* out, size_t cap, const uint8_t* b, size_t n) {
    if (!b || n >= cap) return -1;
    memcpy(out, b, n);
    out[n] = 0;
    return 0;
}

// Walks the fields of one message: field() reads a field it knows (0), ends the walk as malformed
// (-1), or leaves it to be skipped (1).
typedef int (*PbField)(void* ctx, PbIn* in, int field, int wire);
static int pb_walk(const uint8_t* data, size_t n, void* ctx, PbField field_fn) {
    PbIn in = {data, n, 0, 0};
    while (in.pos < in.n && !in.bad) {
        const uint64_t key = pb_read_varint(&in);
        const int r = in.bad ? -1 : field_fn(ctx, &in, (int)(key >> 3), (int)(key & 7));
        if (r < 0) return -1;
        if (r > 0) pb_skip(&in, (int)(key & 7));
    }
    return in.bad ? -1 : 0;
}

// Summary.Value: tag (1), simple_value (2)
static int pb_value_field(void* ctx, PbIn* in, int field, int wire) {
    TfValue* v = (TfValue*)ctx;
    size_t len = 0;
    if (field == 1 && wire == 2) {
        const uint8_t* b = pb_read_bytes(in, &len);
        return pb_copy_string(v->tag, sizeof(v->tag), b, len);
    }
    if (field == 2 && wire == 5) {
        const uint32_t bits = (uint32_t)pb_read_fixed(in, 4);
        memcpy(&v->value, &bits, 4);
        return 0;
    }
    return 1;
}

// Summary: its values (1)
static int pb_summary_field(void* ctx, PbIn* in, int field, int wire) {
    TfEvent* e = (TfEvent*)ctx;
    size_t len = 0;
    if (field != 1 || wire != 2) return 1;
    const uint8_t* b = pb_read_bytes(in, &len);
    if (!b || e->nvalues >= TFEVENTS_MAX_VALUES) return -1;
    TfValue* v = &e->values[e->nvalues];
    memset(v, 0, sizeof(*v));
    if (pb_walk(b, len, v, pb_value_field)) return -1;
    e->nvalues++;
    return 0;
}

// SourceMetadata: writer (1)
static int pb_source_field(void* ctx, PbIn* in, int field, int wire) {
    TfEvent* e = (TfEvent*)ctx;
    size_t len = 0;
    if (field != 1 || wire != 2) return 1;
    const uint8_t* b = pb_read_bytes(in, &len);
    return pb_copy_string(e->source_writer, sizeof(e->source_writer), b, len);
}

// Event: wall_time (1), step (2), file_version (3), summary (5), source_metadata (10)
static int pb_event_field(void* ctx, PbIn* in, int field, int wire) {
    TfEvent* e = (TfEvent*)ctx;
    size_t len = 0;
    if (field == 1 && wire == 1) {
        const uint64_t bits = pb_read_fixed(in, 8);
        memcpy(&e->wall_time, &bits, 8);
        return 0;
    }
    if (field == 2 && wire == 0) { e->step = (int64_t)pb_read_varint(in); return 0; }
    if (field == 3 && wire == 2) {
        const uint8_t* b = pb_read_bytes(in, &len);
        return pb_copy_string(e->file_version, sizeof(e->file_version), b, len);
    }
    if ((field == 5 || field == 10) && wire == 2) {
        const uint8_t* b = pb_read_bytes(in, &len);
        return b && !pb_walk(b, len, e, field == 5 ? pb_summary_field : pb_source_field) ? 0 : -1;
    }
    return 1;
}

int tfevents_decode_event(const uint8_t* data, size_t n, TfEvent* e) {
    memset(e, 0, sizeof(*e));
    return pb_walk(data, n, e, pb_event_field);
}

// ---- records

static uint32_t le32(const uint8_t* b) { return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24; }

int tfevents_next_record(const uint8_t* buf, size_t len, size_t* pos, const uint8_t** data, size_t* n) {
    const size_t p = *pos;
    if (p >= len) return 0;
    if (len - p < 12) return -1;
    uint64_t m = 0;
    for (int i = 0; i < 8; i++) m |= (uint64_t)buf[p + (size_t)i] << (8 * i);
    if (le32(buf + p + 8) != tfevents_masked_crc(buf + p, 8)) return -1;
    if (m > len - p - 12 || len - p - 12 - m < 4) return -1;
    const uint8_t* d = buf + p + 12;
    if (le32(d + m) != tfevents_masked_crc(d, (size_t)m)) return -1;
    *data = d;
    *n = (size_t)m;
    *pos = p + 12 + (size_t)m + 4;
    return 1;
}

// ---- the writer

static void put_le(uint8_t* b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
}

int tfevents_write(TfWriter* w, const TfEvent* e) {
    uint8_t data[TFEVENTS_MAX_VALUES * (TFEVENTS_MAX_TAG + 12) + 128], head[12], foot[4];
    const size_t n = tfevents_encode_event(e, data, sizeof(data));
    assertCheck(n != TFEVENTS_NO_FIT); // (TfEvent's limits make every event fit)
    put_le(head, n, 8);
    put_le(head + 8, tfevents_masked_crc(head, 8), 4);
    put_le(foot, tfevents_masked_crc(data, n), 4);
    int bad = fwrite(head, 1, 12, w->fp) != 12;
    bad |= fwrite(data, 1, n, w->fp) != n;
    bad |= fwrite(foot, 1, 4, w->fp) != 4;
    bad |= fflush(w->fp) != 0; // (every event reaches the file as it is written: TensorBoard shows the step now)
    return bad ? -1 : 0;
}

static void tfevents_first(TfWriter* w, double wall_time) {
    TfEvent e;
    memset(&e, 0, sizeof(e));
    e.wall_time = wall_time;
    snprintf(e.file_version, sizeof(e.file_version), "%s", TFEVENTS_FILE_VERSION);
    snprintf(e.source_writer, sizeof(e.source_writer), "%s", TFEVENTS_WRITER);
    if (tfevents_write(w, &e)) fatal("check that --tensorboard is writable", "cannot write '%s': %s", w->path, strerror(errno));
}

void tfevents_create(TfWriter* w, const char* dir, double wall_time) {
    char host[256] = "localhost", name[320];
    if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = 0;
    for (char* c = host; *c; c++)
        if (*c == '/') *c = '_';
    snprintf(name, sizeof(name), "events.out.tfevents.%lld.%s", (long long)wall_time, host);
    mkdir_p(dir);
    path_join(w->path, sizeof(w->path), dir, name);
    w->fp = fopen(w->path, "wbx"); // (never over another run's file of the same second)
    if (!w->fp) fatal("give each run its own --tensorboard directory, or start again", "cannot create '%s': %s", w->path, strerror(errno));
    tfevents_first(w, wall_time);
}

void tfevents_append(TfWriter* w, const char* path, double wall_time) {
    snprintf(w->path, sizeof(w->path), "%s", path);
    w->fp = fopen(path, "ab");
    if (!w->fp) fatal("check that --tensorboard is writable", "cannot open '%s' for writing: %s", path, strerror(errno));
    if (file_size(path) == 0) tfevents_first(w, wall_time);
}

int tfevents_close(TfWriter* w) {
    FILE* fp = w->fp;
    w->fp = NULL;
    return fp && fclose(fp) != 0 ? -1 : 0;
}

// The <unix seconds> of an event file's name, or -1 when the name is not an event file's.
static long long tfevents_name_time(const char* name) {
    static const char prefix[] = "events.out.tfevents.";
    if (strncmp(name, prefix, sizeof(prefix) - 1)) return -1;
    char* end = NULL;
    const long long t = strtoll(name + sizeof(prefix) - 1, &end, 10);
    return end != name + sizeof(prefix) - 1 && *end == '.' ? t : -1;
}

int tfevents_find_latest(const char* dir, char* path, size_t cap) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    char best[512] = "";
    long long best_t = -1;
    for (struct dirent* de; (de = readdir(d));) {
        const long long t = tfevents_name_time(de->d_name);
        if (t < 0 || atomic_tmp_base_len(de->d_name) || strlen(de->d_name) >= sizeof(best)) continue;
        if (t > best_t || (t == best_t && strcmp(de->d_name, best) > 0)) {
            best_t = t;
            snprintf(best, sizeof(best), "%s", de->d_name);
        }
    }
    closedir(d);
    if (best_t < 0) return 0;
    path_join(path, cap, dir, best);
    return 1;
}

double tfevents_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
