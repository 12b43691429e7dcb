// safetensors reader/writer. The reader checks every rule of the format (docs/FORMATS.md) before
// anything is read, so a tensor that is reported present is also fully inside the file.
#define _FILE_OFFSET_BITS 64
#define _GNU_SOURCE
#include "base/safetensors.h"
#include "base/json.h"
#include "base/bf16.h"
#include "base/check.h"
#include "base/fileio.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// The file format is little-endian and so is every machine we build for; the raw reads below
// rely on it.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define ST_MAX_HEADER 100000000ull

static const char* DTYPE_NAMES[ST_NUM_DTYPES] = { "F32", "BF16", "F16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL" };
static const size_t DTYPE_SIZES[ST_NUM_DTYPES] = { 4, 2, 2, 8, 8, 4, 2, 1, 1, 1 };

const char* st_dtype_name(StDtype d) { return (unsigned)d < ST_NUM_DTYPES ? DTYPE_NAMES[d] : "?"; }

// Parse a dtype name ("F32", "BF16", ...); -1 if unknown.
static int st_dtype_from_name(const char* name) {
    for (int i = 0; i < ST_NUM_DTYPES; i++) if (strcmp(DTYPE_NAMES[i], name) == 0) return i;
    return -1;
}

// ---------------------------------------------------------------------------------------------
// reader


static void shape_str(const StTensor* t, char* out, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(out + o, cap - o, "[");
    for (int d = 0; d < t->ndim && o < cap; d++)
        o += (size_t)snprintf(out + o, cap - o, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (o < cap) snprintf(out + o, cap - o, "]");
}

static int cmp_by_offset(const void* a, const void* b) {
    const StTensor* x = *(const StTensor* const*)a; const StTensor* y = *(const StTensor* const*)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_by_name(const void* a, const void* b) {
    return strcmp(((const StTensor*)a)->name, ((const StTensor*)b)->name);
}

static void st_free_contents(StFile* f) {
    if (f->fp) fclose(f->fp);
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->n_meta; i++) { free(f->meta_keys[i]); free(f->meta_values[i]); }
    free(f->meta_keys); free(f->meta_values);
    f->fp = NULL; f->tensors = NULL; f->meta_keys = f->meta_values = NULL;
    f->n_tensors = f->n_meta = 0;
}

static char* xstrdup(const char* s) {
    size_t n = strlen(s) + 1;
    char* d = (char*)mallocCheck(n);
    memcpy(d, s, n);
    return d;
}

// Parses one header entry into t; returns 0 or -1 with err set.
static int parse_entry(const char* path, const char* name, const JsonValue* e, StTensor* t, char* err, size_t errcap) {
    if (e->type != JSON_OBJECT)
        return path_fail(err, errcap, path, "header entry '%s' is a JSON %s, expected an object with dtype, shape, data_offsets", name, json_type_name(e->type));
    const char* dup = json_find_duplicate_key(e);
    if (dup) return path_fail(err, errcap, path, "header entry '%s' has the field '%s' twice", name, dup);
    const char* dt = json_as_string(json_get(e, "dtype"));
    if (!dt) return path_fail(err, errcap, path, "tensor '%s': missing or non-string \"dtype\"", name);
    int d = st_dtype_from_name(dt);
    if (d < 0) return path_fail(err, errcap, path, "tensor '%s': unknown dtype '%s' (supported: F32 BF16 F16 F64 I64 I32 I16 I8 U8 BOOL)", name, dt);
    t->dtype = (StDtype)d;
    const JsonValue* sh = json_get(e, "shape");
    if (!sh || sh->type != JSON_ARRAY) return path_fail(err, errcap, path, "tensor '%s': missing or non-array \"shape\"", name);
    if (sh->n > ST_MAX_DIMS) return path_fail(err, errcap, path, "tensor '%s': %d dimensions, at most %d supported", name, sh->n, ST_MAX_DIMS);
    t->ndim = sh->n;
    // overflow rule: prod(shape) * element size must fit in 64 bits
    uint64_t numel = 1; int overflow = 0;
    for (int i = 0; i < sh->n; i++) {
        uint64_t dim;
        if (!json_as_uint64(&sh->items[i], &dim) || dim > (uint64_t)INT64_MAX)
            return path_fail(err, errcap, path, "tensor '%s': shape[%d] is not a non-negative integer", name, i);
        t->shape[i] = (int64_t)dim;
        if (dim != 0 && numel > UINT64_MAX / dim) overflow = 1;
        else numel *= dim;
    }
    // a zero dimension makes the product 0 whatever the other dims are
    for (int i = 0; i < sh->n; i++) if (t->shape[i] == 0) { numel = 0; overflow = 0; }
    if (overflow || (numel != 0 && numel > UINT64_MAX / DTYPE_SIZES[d]))
        return path_fail(err, errcap, path, "tensor '%s': overflow in the byte size of its shape (prod(shape) * %zu does not fit in 64 bits)", name, DTYPE_SIZES[d]);
    t->numel = numel;
    const JsonValue* off = json_get(e, "data_offsets");
    if (!off || off->type != JSON_ARRAY || off->n != 2 ||
        !json_as_uint64(&off->items[0], &t->begin) || !json_as_uint64(&off->items[1], &t->end))
        return path_fail(err, errcap, path, "tensor '%s': \"data_offsets\" must be [begin, end] with non-negative integers", name);
    if (t->end < t->begin)
        return path_fail(err, errcap, path, "tensor '%s': data_offsets end (%llu) < begin (%llu)", name,
                       (unsigned long long)t->end, (unsigned long long)t->begin);
    uint64_t want = numel * DTYPE_SIZES[d];
    if (t->end - t->begin != want) {
        char s[256]; shape_str(t, s, sizeof(s));
        return path_fail(err, errcap, path, "tensor '%s': data_offsets span %llu bytes but %s %s needs %llu (end - begin != nelements * element size)",
                       name, (unsigned long long)(t->end - t->begin), dt, s, (unsigned long long)want);
    }
    return 0;
}

// The steps of st_try_open. Each returns 0, or -1 with the rule it found broken in err; the
// caller frees what they allocated on f.

// The header length N and the header's text (8 + N within the file), as a JSON object without
// duplicate names; *fsize = the file's size.
static int st_read_header(StFile* f, const char* path, JsonValue** root, uint64_t* fsize, char* err, size_t errcap) {
    struct stat sb;
    if (fstat(fileno(f->fp), &sb) != 0 || !S_ISREG(sb.st_mode)) return path_fail(err, errcap, path, "not a regular file");
    *fsize = (uint64_t)sb.st_size;
    if (*fsize < 8) return path_fail(err, errcap, path, "file is shorter than 8 bytes (%llu bytes), not a safetensors file", (unsigned long long)*fsize);
    unsigned char lenbuf[8];
    if (fread(lenbuf, 1, 8, f->fp) != 8) return path_fail(err, errcap, path, "cannot read the header length");
    uint64_t N = 0;
    for (int i = 7; i >= 0; i--) N = (N << 8) | lenbuf[i];
    if (N > ST_MAX_HEADER) return path_fail(err, errcap, path, "header length %llu exceeds the 100000000-byte limit (not a safetensors file?)", (unsigned long long)N);
    if (8 + N > *fsize) return path_fail(err, errcap, path, "header (8 + %llu bytes) runs past the end of the file (%llu bytes): truncated", (unsigned long long)N, (unsigned long long)*fsize);
    f->header_len = N;
    f->data_start = 8 + N;
    char* hdr = (char*)mallocCheck((size_t)N + 1);
    hdr[N] = '\0';
    int rc = -1;
    size_t bad;
    char jerr[256];
    if (N && fread(hdr, 1, (size_t)N, f->fp) != (size_t)N) path_fail(err, errcap, path, "cannot read the %llu-byte header", (unsigned long long)N);
    else if (!json_utf8_valid(hdr, (size_t)N, &bad))
        path_fail(err, errcap, path, "header is not valid UTF-8 (byte 0x%02x at header offset %zu)", (unsigned char)hdr[bad], bad);
    else if (N == 0 || hdr[0] != '{') path_fail(err, errcap, path, "header does not start with '{' (invalid JSON header)");
    else if (!(*root = json_parse(hdr, (size_t)N, jerr, sizeof(jerr)))) path_fail(err, errcap, path, "header is not valid JSON: %s", jerr);
    else if ((*root)->type != JSON_OBJECT) path_fail(err, errcap, path, "header is not a JSON object");
    else if (json_find_duplicate_key(*root)) path_fail(err, errcap, path, "duplicate tensor name '%s' in header", json_find_duplicate_key(*root));
    else rc = 0;
    free(hdr);
    return rc;
}

// "__metadata__": string values only, each key once.
static int st_parse_metadata(StFile* f, const char* path, const JsonValue* m, char* err, size_t errcap) {
    if (m->type != JSON_OBJECT) return path_fail(err, errcap, path, "__metadata__ is not a JSON object");
    const char* mdup = json_find_duplicate_key(m);
    if (mdup) return path_fail(err, errcap, path, "__metadata__ has the key '%s' twice", mdup);
    f->meta_keys = (char**)callocCheck((size_t)m->n + 1, sizeof(char*));
    f->meta_values = (char**)callocCheck((size_t)m->n + 1, sizeof(char*));
    for (int k = 0; k < m->n; k++) {
        if (m->items[k].type != JSON_STRING)
            return path_fail(err, errcap, path, "__metadata__ value of '%s' is a %s; metadata values must be strings", m->keys[k], json_type_name(m->items[k].type));
        f->meta_keys[k] = xstrdup(m->keys[k]);
        f->meta_values[k] = xstrdup(m->items[k].string);
        f->n_meta = k + 1;
    }
    return 0;
}

// Every member of the header: the metadata, and one tensor per other name.
static int st_parse_entries(StFile* f, const char* path, const JsonValue* root, char* err, size_t errcap) {
    int n_entries = 0;
    for (int i = 0; i < root->n; i++) {
        if (strcmp(root->keys[i], "__metadata__") != 0) { n_entries++; continue; }
        if (st_parse_metadata(f, path, &root->items[i], err, errcap) != 0) return -1;
    }
    f->tensors = (StTensor*)callocCheck((size_t)n_entries + 1, sizeof(StTensor));
    for (int i = 0; i < root->n; i++) {
        if (strcmp(root->keys[i], "__metadata__") == 0) continue;
        StTensor* t = &f->tensors[f->n_tensors];
        t->name = xstrdup(root->keys[i]);
        f->n_tensors++;
        if (parse_entry(path, root->keys[i], &root->items[i], t, err, errcap) != 0) return -1;
    }
    return 0;
}

// The tensors, sorted by offset, tile the data buffer from 0 to the end of the file, without
// gaps or overlaps.
static int st_check_tiling(const StFile* f, const char* path, uint64_t fsize, char* err, size_t errcap) {
    StTensor** order = (StTensor**)mallocCheck(((size_t)f->n_tensors + 1) * sizeof(StTensor*));
    for (int i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof(StTensor*), cmp_by_offset);
    uint64_t pos = 0;
    int rc = 0;
    for (int i = 0; i < f->n_tensors && rc == 0; i++) {
        const StTensor* t = order[i];
        if (t->begin > pos)
            rc = path_fail(err, errcap, path, "gap in the data buffer: bytes %llu..%llu belong to no tensor (next tensor '%s' begins at %llu)",
                         (unsigned long long)pos, (unsigned long long)t->begin, t->name, (unsigned long long)t->begin);
        else if (t->begin < pos)
            rc = path_fail(err, errcap, path, "tensors overlap: '%s' begins at byte %llu, before the previous tensor '%s' ends (%llu)",
                         t->name, (unsigned long long)t->begin, order[i - 1]->name, (unsigned long long)pos);
        pos = t->end;
    }
    free(order);
    if (rc) return rc;
    const uint64_t avail = fsize - f->data_start;
    if (pos > avail)
        return path_fail(err, errcap, path, "truncated: the tensors need %llu data bytes but only %llu follow the header (last end + 8 + N != file size)",
                       (unsigned long long)pos, (unsigned long long)avail);
    if (pos < avail)
        return path_fail(err, errcap, path, "%llu trailing bytes after the last tensor (last end + 8 + N = %llu != file size %llu)",
                       (unsigned long long)(avail - pos), (unsigned long long)(pos + f->data_start), (unsigned long long)fsize);
    return 0;
}

int st_try_open(StFile* f, const char* path, char* err, size_t errcap) {
    memset(f, 0, sizeof(*f));
    if (err && errcap) err[0] = '\0';
    if (strlen(path) >= sizeof(f->path)) return path_fail(err, errcap, path, "path too long");
    snprintf(f->path, sizeof(f->path), "%s", path);
    f->fp = fopen(path, "rb");
    if (!f->fp) { int e = errno; return path_fail(err, errcap, path, "cannot open: %s", strerror(e)); }
    JsonValue* root = NULL;
    uint64_t fsize = 0;
    int rc = st_read_header(f, path, &root, &fsize, err, errcap);
    if (rc == 0) rc = st_parse_entries(f, path, root, err, errcap);
    if (rc == 0) rc = st_check_tiling(f, path, fsize, err, errcap);
    json_free(root);
    if (rc != 0) { st_free_contents(f); return -1; }
    qsort(f->tensors, (size_t)f->n_tensors, sizeof(StTensor), cmp_by_name);
    return 0;
}

void st_open(StFile* f, const char* path) {
    char err[1024];
    if (st_try_open(f, path, err, sizeof(err)) != 0)
        fatal("the file is not a valid safetensors file; re-download or re-export it", "%s", err);
}

void st_close(StFile* f) { st_free_contents(f); }

const StTensor* st_find(const StFile* f, const char* name) {
    StTensor key; memset(&key, 0, sizeof(key));
    key.name = (char*)name;
    return (const StTensor*)bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof(StTensor), cmp_by_name);
}

const char* st_meta(const StFile* f, const char* key) {
    for (int i = 0; i < f->n_meta; i++) if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

// Reads bytes [off, off + n) of tensor t.
static void st_read_bytes(StFile* f, const StTensor* t, uint64_t off, void* dst, size_t n) {
    if (n == 0) return;
    if (fseeko(f->fp, (off_t)(f->data_start + t->begin + off), SEEK_SET) != 0)
        fatal("the file is truncated or not seekable", "'%s': seek to tensor '%s' failed", f->path, t->name);
    if (fread(dst, 1, n, f->fp) != n)
        fatal("the file changed or was truncated after it was opened", "'%s': short read of tensor '%s'", f->path, t->name);
}

void st_read_raw(StFile* f, const StTensor* t, void* dst) {
    st_read_bytes(f, t, 0, dst, (size_t)(t->end - t->begin));
}

// Converts n elements of t's dtype at src to the caller's type at dst; first is the index of
// src[0] in the tensor (for messages).
typedef void (*StConvertFn)(const StFile* f, const StTensor* t, const void* src, size_t n, void* dst, uint64_t first);

// Reads tensor t into dst (elements of dst_es bytes) through conv, in chunks so that a large
// tensor needs no full-size temporary.
static void st_read_converted(StFile* f, const StTensor* t, void* dst, size_t dst_es, StConvertFn conv) {
    size_t es = DTYPE_SIZES[t->dtype];
    size_t chunk = t->numel < ST_CHUNK_ELEMS ? (size_t)t->numel : ST_CHUNK_ELEMS;
    void* buf = mallocCheck(chunk * es);
    for (uint64_t i = 0; i < t->numel; i += chunk) {
        size_t n = (size_t)(t->numel - i < chunk ? t->numel - i : chunk);
        st_read_bytes(f, t, i * es, buf, n * es);
        conv(f, t, buf, n, (char*)dst + i * dst_es, i);
    }
    free(buf);
}

static void st_convert_f32(const StFile* f, const StTensor* t, const void* src, size_t n, void* dst, uint64_t first) {
    float* d = (float*)dst;
    if (t->dtype == ST_BF16) { const uint16_t* s = (const uint16_t*)src; for (size_t j = 0; j < n; j++) d[j] = bf16_to_f32(s[j]); }
    else if (t->dtype == ST_F16) { const uint16_t* s = (const uint16_t*)src; for (size_t j = 0; j < n; j++) d[j] = fp16_to_f32(s[j]); }
    else { const double* s = (const double*)src; for (size_t j = 0; j < n; j++) d[j] = (float)s[j]; }
}

void st_read_f32(StFile* f, const StTensor* t, float* dst) {
    if (t->dtype == ST_F32) { st_read_raw(f, t, dst); return; }
    if (t->dtype != ST_BF16 && t->dtype != ST_F16 && t->dtype != ST_F64)
        fatal("expected a floating-point tensor", "'%s': tensor '%s' has dtype %s, cannot read it as floats",
              f->path, t->name, st_dtype_name(t->dtype));
    st_read_converted(f, t, dst, sizeof(float), st_convert_f32);
}

static void st_convert_i32(const StFile* f, const StTensor* t, const void* src, size_t n, void* dst, uint64_t first) {
    int32_t* d = (int32_t*)dst;
    for (size_t j = 0; j < n; j++) {
        int64_t v;
        switch (t->dtype) {
            case ST_I64: v = ((const int64_t*)src)[j]; break;
            case ST_I16: v = ((const int16_t*)src)[j]; break;
            case ST_I8:  v = ((const int8_t*)src)[j]; break;
            default:     v = ((const uint8_t*)src)[j]; break;
        }
        if (v < INT32_MIN || v > INT32_MAX)
            fatal(NULL, "'%s': tensor '%s' element %llu = %lld does not fit in int32", f->path, t->name,
                  (unsigned long long)(first + j), (long long)v);
        d[j] = (int32_t)v;
    }
}

void st_read_i32(StFile* f, const StTensor* t, int32_t* dst) {
    if (t->dtype == ST_I32) { st_read_raw(f, t, dst); return; }
    if (t->dtype != ST_I64 && t->dtype != ST_I16 && t->dtype != ST_I8 && t->dtype != ST_U8 && t->dtype != ST_BOOL)
        fatal("expected an integer tensor", "'%s': tensor '%s' has dtype %s, cannot read it as integers",
              f->path, t->name, st_dtype_name(t->dtype));
    st_read_converted(f, t, dst, sizeof(int32_t), st_convert_i32);
}

// ---------------------------------------------------------------------------------------------
// writer

struct StWriterEntry {
    char* name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t numel;
    const void* data;
    StFillFn fill;
    void* ctx;
};

void st_writer_init(StWriter* w) { memset(w, 0, sizeof(*w)); }

static StWriterEntry* writer_push(StWriter* w, const char* name, StDtype dtype, int ndim, const int64_t* shape) {
    if ((unsigned)dtype >= ST_NUM_DTYPES) fatal("this is a bug in llmc", "safetensors writer: bad dtype %d for '%s'", (int)dtype, name);
    if (ndim < 0 || ndim > ST_MAX_DIMS) fatal("this is a bug in llmc", "safetensors writer: '%s' has %d dims", name, ndim);
    if (strcmp(name, "__metadata__") == 0) fatal("this is a bug in llmc", "safetensors writer: '__metadata__' is not a tensor name");
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->entries[i].name, name) == 0) fatal("this is a bug in llmc", "safetensors writer: tensor '%s' added twice", name);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        StWriterEntry* ne = (StWriterEntry*)realloc(w->entries, (size_t)w->cap * sizeof(StWriterEntry));
        if (!ne) fatal(NULL, "out of memory");
        w->entries = ne;
    }
    StWriterEntry* e = &w->entries[w->n++];
    memset(e, 0, sizeof(*e));
    e->name = xstrdup(name);
    e->dtype = dtype;
    e->ndim = ndim;
    e->numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) fatal("this is a bug in llmc", "safetensors writer: '%s' has a negative dim", name);
        e->shape[d] = shape[d];
        e->numel *= (uint64_t)shape[d];
    }
    return e;
}

void st_writer_add(StWriter* w, const char* name, StDtype dtype, int ndim, const int64_t* shape, const void* data) {
    StWriterEntry* e = writer_push(w, name, dtype, ndim, shape);
    e->data = data;
}

void st_writer_add_fn(StWriter* w, const char* name, StDtype dtype, int ndim, const int64_t* shape,
                      StFillFn fill, void* ctx) {
    StWriterEntry* e = writer_push(w, name, dtype, ndim, shape);
    e->fill = fill;
    e->ctx = ctx;
}

void st_writer_meta(StWriter* w, const char* key, const char* value) {
    for (int i = 0; i < w->n_meta; i++) {
        if (strcmp(w->meta_kv[2 * i], key) == 0) { // replace
            free(w->meta_kv[2 * i + 1]);
            w->meta_kv[2 * i + 1] = xstrdup(value);
            return;
        }
    }
    char** kv = (char**)realloc(w->meta_kv, (size_t)(w->n_meta + 1) * 2 * sizeof(char*));
    if (!kv) fatal(NULL, "out of memory");
    w->meta_kv = kv;
    kv[2 * w->n_meta] = xstrdup(key);
    kv[2 * w->n_meta + 1] = xstrdup(value);
    w->n_meta++;
}

void st_writer_save(StWriter* w, const char* path) {
    JsonWriter j;
    jw_init(&j, 0);
    jw_begin_object(&j);
    jw_key(&j, "__metadata__");
    jw_begin_object(&j);
    int has_format = 0;
    for (int i = 0; i < w->n_meta; i++) if (strcmp(w->meta_kv[2 * i], "format") == 0) has_format = 1;
    if (!has_format) { jw_key(&j, "format"); jw_string(&j, "pt"); }
    for (int i = 0; i < w->n_meta; i++) { jw_key(&j, w->meta_kv[2 * i]); jw_string(&j, w->meta_kv[2 * i + 1]); }
    jw_end_object(&j);
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const StWriterEntry* e = &w->entries[i];
        uint64_t nbytes = e->numel * DTYPE_SIZES[e->dtype];
        jw_key(&j, e->name);
        jw_begin_object(&j);
        jw_key(&j, "dtype"); jw_string(&j, DTYPE_NAMES[e->dtype]);
        jw_key(&j, "shape"); jw_begin_array(&j);
        for (int d = 0; d < e->ndim; d++) jw_int(&j, e->shape[d]);
        jw_end_array(&j);
        jw_key(&j, "data_offsets"); jw_begin_array(&j); jw_uint(&j, off); jw_uint(&j, off + nbytes); jw_end_array(&j);
        jw_end_object(&j);
        off += nbytes;
    }
    jw_end_object(&j);
    // pad with spaces so the data buffer (at 8 + N) starts 8-byte aligned
    while (j.len % 8 != 0) jw_raw(&j, " ", 1);
    unsigned char lenbuf[8];
    uint64_t N = j.len;
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)(N >> (8 * i));

    AtomicFile af;
    FILE* fp = atomic_open(&af, path);
    fwriteCheck(lenbuf, 1, 8, fp, af.tmp_path);
    fwriteCheck(j.buf, 1, j.len, fp, af.tmp_path);
    jw_free(&j);
    void* chunkbuf = NULL;
    for (int i = 0; i < w->n; i++) {
        const StWriterEntry* e = &w->entries[i];
        size_t es = DTYPE_SIZES[e->dtype];
        if (e->numel == 0) continue;
        if (!e->fill) { fwriteCheck(e->data, es, (size_t)e->numel, fp, af.tmp_path); continue; }
        if (!chunkbuf) chunkbuf = mallocCheck(ST_CHUNK_ELEMS * 8);
        for (uint64_t k = 0; k < e->numel; k += ST_CHUNK_ELEMS) {
            uint64_t n = e->numel - k < ST_CHUNK_ELEMS ? e->numel - k : ST_CHUNK_ELEMS;
            e->fill(e->ctx, chunkbuf, k, n);
            fwriteCheck(chunkbuf, es, (size_t)n, fp, af.tmp_path);
        }
    }
    free(chunkbuf);
    atomic_commit(&af);
}

void st_writer_free(StWriter* w) {
    for (int i = 0; i < w->n; i++) free(w->entries[i].name);
    free(w->entries);
    for (int i = 0; i < 2 * w->n_meta; i++) free(w->meta_kv[i]);
    free(w->meta_kv);
    memset(w, 0, sizeof(*w));
}
