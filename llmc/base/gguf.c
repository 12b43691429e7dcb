// GGUF reader and writer (the format and the reader's rules: docs/FORMATS.md, "GGUF").
#define _FILE_OFFSET_BITS 64
#define _GNU_SOURCE
#include "base/gguf.h"
#include "base/bf16.h"
#include "base/check.h"
#include "base/fileio.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c assumes a little-endian host (GGUF files are little-endian)"
#endif

static const char* VALUE_TYPE_NAMES[GGUF_NUM_VALUE_TYPES] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64" };
// bytes of a scalar of each type in the file (0: string / array, variable)
static const uint8_t VALUE_TYPE_SIZES[GGUF_NUM_VALUE_TYPES] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

const char* gguf_value_type_name(uint32_t t) { return t < GGUF_NUM_VALUE_TYPES ? VALUE_TYPE_NAMES[t] : "?"; }

const char* gguf_type_name(uint32_t t) {
    switch (t) {
        case GGML_TYPE_F32: return "F32";
        case GGML_TYPE_F16: return "F16";
        case GGML_TYPE_Q8_0: return "Q8_0";
        case GGML_TYPE_BF16: return "BF16";
        default: return "an unsupported ggml type";
    }
}

static uint64_t gguf_block_size(uint32_t t) { return t == GGML_TYPE_Q8_0 ? GGUF_QK8_0 : 1; }

uint64_t gguf_row_bytes(uint32_t t, uint64_t n) {
    switch (t) {
        case GGML_TYPE_F32: return n * 4;
        case GGML_TYPE_F16: case GGML_TYPE_BF16: return n * 2;
        case GGML_TYPE_Q8_0: return n / GGUF_QK8_0 * GGUF_Q8_0_BYTES;
        default: return 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Q8_0 (ggml-quants.c, quantize_row_q8_0_ref): the scale is computed and applied in fp32, then
// stored rounded to fp16; the quants use the unrounded reciprocal. roundf rounds half away from 0.

void gguf_quantize_q8_0(const float* x, uint8_t* out, size_t n) {
    for (size_t b = 0; b < n / GGUF_QK8_0; b++) {
        const float* xb = x + b * GGUF_QK8_0;
        uint8_t* ob = out + b * GGUF_Q8_0_BYTES;
        float amax = 0.0f;
        for (int j = 0; j < GGUF_QK8_0; j++) {
            const float v = fabsf(xb[j]);
            amax = amax > v ? amax : v;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = fp16_from_f32(d);
        memcpy(ob, &dh, 2);
        for (int j = 0; j < GGUF_QK8_0; j++) ob[2 + j] = (uint8_t)(int8_t)roundf(xb[j] * id);
    }
}

void gguf_dequantize_q8_0(const uint8_t* in, float* x, size_t n) {
    for (size_t b = 0; b < n / GGUF_QK8_0; b++) {
        const uint8_t* ib = in + b * GGUF_Q8_0_BYTES;
        uint16_t dh;
        memcpy(&dh, ib, 2);
        const float d = fp16_to_f32(dh);
        for (int j = 0; j < GGUF_QK8_0; j++) x[b * GGUF_QK8_0 + j] = (float)(int8_t)ib[2 + j] * d;
    }
}

// ---------------------------------------------------------------------------------------------
// reader: a cursor over the file that refuses to read past its end

typedef struct {
    FILE* fp;
    const char* path;
    uint64_t pos, size;
    char* err; size_t errcap;
} GgufCursor;

#define CFAIL(c, ...) path_fail((c)->err, (c)->errcap, (c)->path, __VA_ARGS__)

static uint64_t cur_left(const GgufCursor* c) { return c->size - c->pos; }

static int cur_read(GgufCursor* c, void* dst, uint64_t n, const char* what) {
    if (n > cur_left(c))
        return CFAIL(c, "truncated: %s (%llu bytes at offset %llu) runs past the end of the file (%llu bytes)", what,
                     (unsigned long long)n, (unsigned long long)c->pos, (unsigned long long)c->size);
    if (n && fread(dst, 1, (size_t)n, c->fp) != (size_t)n) return CFAIL(c, "read error at offset %llu", (unsigned long long)c->pos);
    c->pos += n;
    return 0;
}

static int cur_u32(GgufCursor* c, uint32_t* v, const char* what) { return cur_read(c, v, 4, what); }
static int cur_u64(GgufCursor* c, uint64_t* v, const char* what) { return cur_read(c, v, 8, what); }

// A string: u64 length, then the bytes (no terminator in the file). A NUL inside is refused (no
// tool reads such a name correctly).
static int cur_str(GgufCursor* c, char** out, const char* what) {
    uint64_t n;
    *out = NULL;
    if (cur_u64(c, &n, what)) return -1;
    if (n > cur_left(c))
        return CFAIL(c, "truncated: %s claims %llu bytes at offset %llu, only %llu remain in the file", what,
                     (unsigned long long)n, (unsigned long long)c->pos, (unsigned long long)cur_left(c));
    char* s = (char*)mallocCheck((size_t)n + 1);
    if (cur_read(c, s, n, what)) { free(s); return -1; }
    s[n] = '\0';
    if (strlen(s) != n) { free(s); return CFAIL(c, "%s holds a NUL byte", what); }
    *out = s;
    return 0;
}

static void gguf_kv_free(GgufKV* kv) {
    free(kv->key); free(kv->str); free(kv->arr);
    if (kv->strs) for (uint64_t i = 0; i < kv->n; i++) free(kv->strs[i]);
    free(kv->strs);
}

static void gguf_free_contents(GgufFile* f) {
    if (f->fp) fclose(f->fp);
    for (int64_t i = 0; i < f->n_kv; i++) gguf_kv_free(&f->kv[i]);
    for (int64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->kv); free(f->tensors);
    f->fp = NULL; f->kv = NULL; f->tensors = NULL; f->n_kv = f->n_tensors = 0;
}

// A numeric scalar from its raw bytes into u / i / f (each where it holds the value exactly).
static void gguf_kv_set_number(GgufKV* kv, const unsigned char* b) {
    switch (kv->type) {
        case GGUF_U8:  kv->u = b[0]; break;
        case GGUF_BOOL: kv->u = b[0] != 0; break;
        case GGUF_I8:  kv->i = (int8_t)b[0]; break;
        case GGUF_U16: { uint16_t v; memcpy(&v, b, 2); kv->u = v; break; }
        case GGUF_I16: { int16_t v; memcpy(&v, b, 2); kv->i = v; break; }
        case GGUF_U32: { uint32_t v; memcpy(&v, b, 4); kv->u = v; break; }
        case GGUF_I32: { int32_t v; memcpy(&v, b, 4); kv->i = v; break; }
        case GGUF_U64: { memcpy(&kv->u, b, 8); break; }
        case GGUF_I64: { memcpy(&kv->i, b, 8); break; }
        case GGUF_F32: { float v; memcpy(&v, b, 4); kv->f = v; return; }
        case GGUF_F64: { memcpy(&kv->f, b, 8); return; }
        default: return;
    }
    if (kv->type == GGUF_I8 || kv->type == GGUF_I16 || kv->type == GGUF_I32 || kv->type == GGUF_I64) {
        kv->f = (double)kv->i;
        kv->u = kv->i >= 0 ? (uint64_t)kv->i : 0;
    } else {
        kv->f = (double)kv->u;
        kv->i = kv->u <= (uint64_t)INT64_MAX ? (int64_t)kv->u : -1;
    }
}

// An array value: element type (no nested arrays), count, elements. The count is checked against
// the bytes left before anything is allocated (every element takes at least 1 byte, a string 8).
static int gguf_read_array(GgufCursor* c, GgufKV* kv) {
    if (cur_u32(c, &kv->arr_type, "an array's element type") || cur_u64(c, &kv->n, "an array's length")) return -1;
    if (kv->arr_type >= GGUF_NUM_VALUE_TYPES)
        return CFAIL(c, "metadata '%s': unknown array element type %u", kv->key, kv->arr_type);
    if (kv->arr_type == GGUF_ARRAY) return CFAIL(c, "metadata '%s': arrays of arrays are not supported", kv->key);
    const uint64_t es = kv->arr_type == GGUF_STRING ? 8 : VALUE_TYPE_SIZES[kv->arr_type];
    if (kv->n > cur_left(c) / es)
        return CFAIL(c, "truncated: metadata '%s' claims %llu elements of %s, more than the %llu bytes left can hold", kv->key,
                     (unsigned long long)kv->n, gguf_value_type_name(kv->arr_type), (unsigned long long)cur_left(c));
    if (kv->arr_type != GGUF_STRING) {
        kv->arr = mallocCheck((size_t)(kv->n * es) + 1);
        return cur_read(c, kv->arr, kv->n * es, "an array's elements");
    }
    kv->strs = (char**)callocCheck((size_t)kv->n + 1, sizeof(char*));
    for (uint64_t k = 0; k < kv->n; k++) if (cur_str(c, &kv->strs[k], "an array's string")) return -1;
    return 0;
}

static int gguf_read_kv(GgufCursor* c, GgufFile* f, GgufKV* kv) {
    if (cur_str(c, &kv->key, "a metadata key")) return -1;
    if (kv->key[0] == '\0') return CFAIL(c, "empty metadata key");
    if (cur_u32(c, &kv->type, "a metadata type")) return -1;
    if (kv->type >= GGUF_NUM_VALUE_TYPES) return CFAIL(c, "metadata '%s': unknown value type %u", kv->key, kv->type);
    kv->n = 1;
    if (kv->type == GGUF_STRING) return cur_str(c, &kv->str, "a metadata string");
    if (kv->type == GGUF_ARRAY) return gguf_read_array(c, kv);
    unsigned char b[8];
    if (cur_read(c, b, VALUE_TYPE_SIZES[kv->type], "a metadata value")) return -1;
    gguf_kv_set_number(kv, b);
    return 0;
}

static int gguf_read_tensor_info(GgufCursor* c, GgufFile* f, GgufTensor* t) {
    uint32_t nd;
    if (cur_str(c, &t->name, "a tensor name")) return -1;
    if (t->name[0] == '\0') return CFAIL(c, "a tensor has an empty name");
    if (strlen(t->name) > GGUF_MAX_NAME)
        return CFAIL(c, "tensor name '%.40s...' is %zu bytes long, the limit is %d", t->name, strlen(t->name), GGUF_MAX_NAME);
    if (cur_u32(c, &nd, "a tensor's dimension count")) return -1;
    if (nd < 1 || nd > GGUF_MAX_DIMS) return CFAIL(c, "tensor '%s' has %u dimensions (1 to %d allowed)", t->name, nd, GGUF_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t ne;
        if (cur_u64(c, &ne, "a tensor dimension")) return -1;
        if (ne == 0 || ne > (uint64_t)INT64_MAX) return CFAIL(c, "tensor '%s': dimension %u is %llu (must be >= 1)", t->name, d, (unsigned long long)ne);
        if (numel > (uint64_t)INT64_MAX / ne) return CFAIL(c, "tensor '%s': the element count overflows 63 bits", t->name);
        numel *= ne;
        t->ne[d] = (int64_t)ne;
    }
    t->numel = numel;
    if (numel > (uint64_t)INT64_MAX / 4) return CFAIL(c, "tensor '%s': its byte size overflows 63 bits", t->name);
    if (cur_u32(c, &t->type, "a tensor type") || cur_u64(c, &t->offset, "a tensor offset")) return -1;
    if (gguf_row_bytes(t->type, 1 * gguf_block_size(t->type)) == 0)
        return CFAIL(c, "tensor '%s' has ggml type %u; this tool reads F32, F16, BF16 and Q8_0 only", t->name, t->type);
    if ((uint64_t)t->ne[0] % gguf_block_size(t->type))
        return CFAIL(c, "tensor '%s': its rows (%lld values) are not a whole number of %s blocks of %llu", t->name,
                     (long long)t->ne[0], gguf_type_name(t->type), (unsigned long long)gguf_block_size(t->type));
    t->nbytes = gguf_row_bytes(t->type, (uint64_t)t->ne[0]) * (numel / (uint64_t)t->ne[0]);
    return 0;
}

static int cmp_str_ptr(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

// The first name of names[0..n) that appears twice (sorted, so n log n for hostile counts), or NULL.
static const char* gguf_find_dup(char** names, int64_t n) {
    qsort(names, (size_t)n, sizeof(char*), cmp_str_ptr);
    for (int64_t i = 1; i < n; i++) if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

// No metadata key and no tensor name twice.
static int gguf_check_unique(GgufCursor* c, const GgufFile* f) {
    const int64_t n = f->n_kv > f->n_tensors ? f->n_kv : f->n_tensors;
    char** names = (char**)mallocCheck(((size_t)n + 1) * sizeof(char*));
    for (int64_t i = 0; i < f->n_kv; i++) names[i] = f->kv[i].key;
    const char* dup = gguf_find_dup(names, f->n_kv);
    int rc = dup ? CFAIL(c, "metadata key '%s' appears twice", dup) : 0;
    for (int64_t i = 0; i < f->n_tensors; i++) names[i] = f->tensors[i].name;
    dup = rc ? NULL : gguf_find_dup(names, f->n_tensors);
    if (dup) rc = CFAIL(c, "tensor '%s' appears twice", dup);
    free(names);
    return rc;
}

static int cmp_tensor_offset(const void* a, const void* b) {
    const GgufTensor* x = *(const GgufTensor* const*)a; const GgufTensor* y = *(const GgufTensor* const*)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

// general.alignment (a u32 power of two when present), then every tensor's bytes: aligned, inside
// the file, no two overlapping.
static int gguf_check_layout(GgufCursor* c, GgufFile* f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const GgufKV* al = gguf_kv(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_U32 || al->u == 0 || (al->u & (al->u - 1)))
            return CFAIL(c, "general.alignment must be a u32 power of two (it is a %s)", gguf_value_type_name(al->type));
        f->alignment = al->u;
    }
    f->data_start = (c->pos + f->alignment - 1) / f->alignment * f->alignment;
    const uint64_t avail = c->size >= f->data_start ? c->size - f->data_start : 0;
    if (f->n_tensors && c->size < f->data_start) return CFAIL(c, "truncated: the file ends before its data section");
    GgufTensor** order = (GgufTensor**)mallocCheck(((size_t)f->n_tensors + 1) * sizeof(GgufTensor*));
    for (int64_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof(GgufTensor*), cmp_tensor_offset);
    int rc = 0;
    uint64_t end = 0;
    for (int64_t i = 0; i < f->n_tensors && rc == 0; i++) {
        const GgufTensor* t = order[i];
        if (t->offset % f->alignment)
            rc = CFAIL(c, "tensor '%s': data offset %llu is not a multiple of the alignment %llu", t->name,
                       (unsigned long long)t->offset, (unsigned long long)f->alignment);
        else if (t->offset > avail || t->nbytes > avail - t->offset)
            rc = CFAIL(c, "truncated: tensor '%s' needs bytes %llu..%llu of the data section, which has %llu", t->name,
                       (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes), (unsigned long long)avail);
        else if (i > 0 && t->offset < end)
            rc = CFAIL(c, "tensors '%s' and '%s' overlap", order[i - 1]->name, t->name);
        end = t->offset + t->nbytes;
    }
    free(order);
    return rc;
}

static int gguf_read_header(GgufCursor* c, GgufFile* f) {
    char magic[4];
    uint64_t nt, nkv;
    if (c->size < 24) return CFAIL(c, "file is %llu bytes, shorter than a GGUF header (24)", (unsigned long long)c->size);
    if (cur_read(c, magic, 4, "the magic") || memcmp(magic, GGUF_MAGIC, 4) != 0)
        return CFAIL(c, "not a GGUF file (it does not start with \"GGUF\")");
    if (cur_u32(c, &f->version, "the version")) return -1;
    if (f->version != 2 && f->version != 3)
        return CFAIL(c, "GGUF version %u; versions 2 and 3 are read (llama.cpp writes 3)", f->version);
    if (cur_u64(c, &nt, "the tensor count") || cur_u64(c, &nkv, "the metadata count")) return -1;
    // every metadata entry takes >= 13 bytes (key length, type, 1 byte of value), a tensor >= 33
    if (nkv > cur_left(c) / 13 || nt > cur_left(c) / 33)
        return CFAIL(c, "truncated: %llu metadata entries and %llu tensors cannot fit in the file's %llu bytes",
                     (unsigned long long)nkv, (unsigned long long)nt, (unsigned long long)c->size);
    f->kv = (GgufKV*)callocCheck((size_t)nkv + 1, sizeof(GgufKV));
    for (uint64_t i = 0; i < nkv; i++) {
        f->n_kv = (int64_t)i + 1;
        if (gguf_read_kv(c, f, &f->kv[i])) return -1;
    }
    f->tensors = (GgufTensor*)callocCheck((size_t)nt + 1, sizeof(GgufTensor));
    for (uint64_t i = 0; i < nt; i++) {
        f->n_tensors = (int64_t)i + 1;
        if (gguf_read_tensor_info(c, f, &f->tensors[i])) return -1;
    }
    if (gguf_check_unique(c, f)) return -1;
    return gguf_check_layout(c, f);
}

int gguf_try_open(GgufFile* f, const char* path, char* err, size_t errcap) {
    memset(f, 0, sizeof(*f));
    if (err && errcap) err[0] = '\0';
    if (strlen(path) >= sizeof(f->path)) return path_fail(err, errcap, path, "path too long");
    snprintf(f->path, sizeof(f->path), "%s", path);
    f->fp = fopen(path, "rb");
    if (!f->fp) { int e = errno; return path_fail(err, errcap, path, "cannot open: %s", strerror(e)); }
    struct stat sb;
    if (fstat(fileno(f->fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        gguf_free_contents(f);
        return path_fail(err, errcap, path, "not a regular file");
    }
    GgufCursor c = { f->fp, f->path, 0, (uint64_t)sb.st_size, err, errcap };
    if (gguf_read_header(&c, f) != 0) { gguf_free_contents(f); return -1; }
    return 0;
}

void gguf_open(GgufFile* f, const char* path) {
    char err[1024];
    if (gguf_try_open(f, path, err, sizeof(err)) != 0)
        fatal("the file is not a valid GGUF file; write it again (convert --to gguf)", "%s", err);
}

void gguf_close(GgufFile* f) { gguf_free_contents(f); }

int gguf_is_gguf(const char* path) {
    FILE* fp = fopen(path, "rb");
    if (!fp) return 0;
    char m[4];
    const int yes = fread(m, 1, 4, fp) == 4 && memcmp(m, GGUF_MAGIC, 4) == 0;
    fclose(fp);
    return yes;
}

const GgufKV* gguf_kv(const GgufFile* f, const char* key) {
    for (int64_t i = 0; i < f->n_kv; i++) if (f->kv[i].key && strcmp(f->kv[i].key, key) == 0) return &f->kv[i];
    return NULL;
}

const char* gguf_kv_str(const GgufFile* f, const char* key) {
    const GgufKV* kv = gguf_kv(f, key);
    return kv && kv->type == GGUF_STRING ? kv->str : NULL;
}

int gguf_kv_int(const GgufFile* f, const char* key, int64_t* out) {
    const GgufKV* kv = gguf_kv(f, key);
    if (!kv || kv->type == GGUF_F32 || kv->type == GGUF_F64 || kv->type == GGUF_STRING || kv->type == GGUF_ARRAY) return -1;
    if (kv->type == GGUF_U64 && kv->u > (uint64_t)INT64_MAX) return -1;
    *out = kv->i;
    return 0;
}

int gguf_kv_num(const GgufFile* f, const char* key, double* out) {
    const GgufKV* kv = gguf_kv(f, key);
    if (!kv || kv->type == GGUF_STRING || kv->type == GGUF_ARRAY) return -1;
    *out = kv->f;
    return 0;
}

const GgufTensor* gguf_tensor(const GgufFile* f, const char* name) {
    for (int64_t i = 0; i < f->n_tensors; i++) if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

static void gguf_read_at(GgufFile* f, const GgufTensor* t, uint64_t off, void* dst, size_t n) {
    if (n == 0) return;
    if (fseeko(f->fp, (off_t)(f->data_start + t->offset + off), SEEK_SET) != 0 || fread(dst, 1, n, f->fp) != n)
        fatal("the file changed or was truncated after it was opened", "'%s': short read of tensor '%s'", f->path, t->name);
}

void gguf_read_raw(GgufFile* f, const GgufTensor* t, void* dst) { gguf_read_at(f, t, 0, dst, (size_t)t->nbytes); }

// fp32 from any supported type, one row at a time (no full-size temporary)
void gguf_read_f32(GgufFile* f, const GgufTensor* t, float* dst) {
    if (t->type == GGML_TYPE_F32) { gguf_read_raw(f, t, dst); return; }
    const uint64_t ne0 = (uint64_t)t->ne[0], rows = t->numel / ne0, rb = gguf_row_bytes(t->type, ne0);
    uint8_t* buf = (uint8_t*)mallocCheck((size_t)rb);
    for (uint64_t r = 0; r < rows; r++) {
        float* d = dst + r * ne0;
        gguf_read_at(f, t, r * rb, buf, (size_t)rb);
        if (t->type == GGML_TYPE_Q8_0) { gguf_dequantize_q8_0(buf, d, (size_t)ne0); continue; }
        const uint16_t* s = (const uint16_t*)buf;
        if (t->type == GGML_TYPE_F16) for (uint64_t j = 0; j < ne0; j++) d[j] = fp16_to_f32(s[j]);
        else for (uint64_t j = 0; j < ne0; j++) d[j] = bf16_to_f32(s[j]);
    }
    free(buf);
}

// ---------------------------------------------------------------------------------------------
// writer

typedef struct {
    char name[GGUF_MAX_NAME + 1];
    GgmlType type;
    uint64_t rows, cols;   // rows 0: 1-D
    const float* data;
    float scale;
    uint64_t offset, nbytes;
} GgufWTensor;

struct GgufWriter {
    uint8_t* kv; size_t kv_len, kv_cap; // the serialized metadata section
    uint64_t n_kv;
    char** keys;                        // for the duplicate check
    GgufWTensor* t; int n_t, cap_t;
};

GgufWriter* gguf_writer_new(void) { return (GgufWriter*)callocCheck(1, sizeof(GgufWriter)); }

void gguf_writer_free(GgufWriter* w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys); free(w->kv); free(w->t); free(w);
}

static void wbytes(GgufWriter* w, const void* p, size_t n) {
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        uint8_t* nb = (uint8_t*)realloc(w->kv, cap);
        if (!nb) fatal(NULL, "out of memory writing GGUF metadata (%zu bytes)", cap);
        w->kv = nb; w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}
static void wu32(GgufWriter* w, uint32_t v) { wbytes(w, &v, 4); }
static void wu64(GgufWriter* w, uint64_t v) { wbytes(w, &v, 8); }
static void wstr(GgufWriter* w, const char* s) { const uint64_t n = strlen(s); wu64(w, n); wbytes(w, s, (size_t)n); }

static void wkey(GgufWriter* w, const char* key, GgufValueType type) {
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) fatal("this is a bug in llmc", "GGUF metadata key '%s' set twice", key);
    char** nk = (char**)realloc(w->keys, (size_t)(w->n_kv + 1) * sizeof(char*));
    if (!nk) fatal(NULL, "out of memory");
    w->keys = nk;
    w->keys[w->n_kv] = (char*)mallocCheck(strlen(key) + 1);
    strcpy(w->keys[w->n_kv], key);
    w->n_kv++;
    wstr(w, key);
    wu32(w, (uint32_t)type);
}

void gguf_set_str(GgufWriter* w, const char* key, const char* v) { wkey(w, key, GGUF_STRING); wstr(w, v); }
void gguf_set_u32(GgufWriter* w, const char* key, uint32_t v) { wkey(w, key, GGUF_U32); wu32(w, v); }
void gguf_set_i32(GgufWriter* w, const char* key, int32_t v) { wkey(w, key, GGUF_I32); wbytes(w, &v, 4); }
void gguf_set_f32(GgufWriter* w, const char* key, float v) { wkey(w, key, GGUF_F32); wbytes(w, &v, 4); }
void gguf_set_bool(GgufWriter* w, const char* key, int v) { const uint8_t b = v != 0; wkey(w, key, GGUF_BOOL); wbytes(w, &b, 1); }

void gguf_set_str_array(GgufWriter* w, const char* key, const char* const* items, size_t n) {
    wkey(w, key, GGUF_ARRAY);
    wu32(w, GGUF_STRING); wu64(w, n);
    for (size_t i = 0; i < n; i++) wstr(w, items[i]);
}

void gguf_set_i32_array(GgufWriter* w, const char* key, const int32_t* items, size_t n) {
    wkey(w, key, GGUF_ARRAY);
    wu32(w, GGUF_I32); wu64(w, n);
    wbytes(w, items, n * 4);
}

void gguf_add_tensor(GgufWriter* w, const char* name, GgmlType type, uint64_t rows, uint64_t cols, const float* data, float scale) {
    if (strlen(name) > GGUF_MAX_NAME) fatal("this is a bug in llmc", "GGUF tensor name '%s' is too long", name);
    if (type == GGML_TYPE_Q8_0 && cols % GGUF_QK8_0)
        fatal("this is a bug in llmc: fall back to F16 for such rows", "tensor '%s': Q8_0 rows of %llu values", name, (unsigned long long)cols);
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 64;
        GgufWTensor* nt = (GgufWTensor*)realloc(w->t, (size_t)w->cap_t * sizeof(GgufWTensor));
        if (!nt) fatal(NULL, "out of memory");
        w->t = nt;
    }
    GgufWTensor* t = &w->t[w->n_t++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->type = type; t->rows = rows; t->cols = cols; t->data = data; t->scale = scale;
    t->nbytes = gguf_row_bytes(type, cols) * (rows ? rows : 1);
}

static uint64_t align_up(uint64_t x) { return (x + GGUF_DEFAULT_ALIGNMENT - 1) / GGUF_DEFAULT_ALIGNMENT * GGUF_DEFAULT_ALIGNMENT; }

// One row of t, scaled and encoded, into buf (gguf_row_bytes bytes); tmp holds cols floats.
static void gguf_encode_row(const GgufWTensor* t, uint64_t r, uint8_t* buf, float* tmp) {
    const float* src = t->data + r * t->cols;
    if (t->scale != 1.0f) { for (uint64_t j = 0; j < t->cols; j++) tmp[j] = src[j] * t->scale; src = tmp; }
    uint16_t* h = (uint16_t*)buf;
    switch (t->type) {
        case GGML_TYPE_F32: memcpy(buf, src, (size_t)t->cols * 4); break;
        case GGML_TYPE_F16: for (uint64_t j = 0; j < t->cols; j++) h[j] = fp16_from_f32(src[j]); break;
        case GGML_TYPE_BF16: for (uint64_t j = 0; j < t->cols; j++) h[j] = bf16_from_f32(src[j]); break;
        case GGML_TYPE_Q8_0: gguf_quantize_q8_0(src, buf, (size_t)t->cols); break;
    }
}

static void gguf_write_tensor_infos(GgufWriter* w, FILE* fp, const char* path) {
    uint8_t* saved = w->kv; size_t saved_len = w->kv_len, saved_cap = w->kv_cap;
    w->kv = NULL; w->kv_len = w->kv_cap = 0; // reuse the byte buffer helpers for the infos
    uint64_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        GgufWTensor* t = &w->t[i];
        t->offset = off;
        wstr(w, t->name);
        wu32(w, t->rows ? 2 : 1);
        wu64(w, t->cols);
        if (t->rows) wu64(w, t->rows);
        wu32(w, (uint32_t)t->type);
        wu64(w, t->offset);
        off = align_up(off + t->nbytes);
    }
    if (w->kv_len) fwriteCheck(w->kv, 1, w->kv_len, fp, path);
    free(w->kv);
    w->kv = saved; w->kv_len = saved_len; w->kv_cap = saved_cap;
}

static void write_zeros(FILE* fp, uint64_t n, const char* path) {
    static const uint8_t z[GGUF_DEFAULT_ALIGNMENT];
    if (n) fwriteCheck(z, 1, (size_t)n, fp, path);
}

void gguf_writer_save(GgufWriter* w, const char* path) {
    AtomicFile af;
    FILE* fp = atomic_open(&af, path);
    const uint32_t version = GGUF_VERSION;
    const uint64_t nt = (uint64_t)w->n_t;
    fwriteCheck(GGUF_MAGIC, 1, 4, fp, path);
    fwriteCheck(&version, 4, 1, fp, path);
    fwriteCheck(&nt, 8, 1, fp, path);
    fwriteCheck(&w->n_kv, 8, 1, fp, path);
    if (w->kv_len) fwriteCheck(w->kv, 1, w->kv_len, fp, path);
    gguf_write_tensor_infos(w, fp, path);
    long pos = ftell(fp);
    write_zeros(fp, align_up((uint64_t)pos) - (uint64_t)pos, path);
    uint64_t maxcols = 1;
    for (int i = 0; i < w->n_t; i++) if (w->t[i].cols > maxcols) maxcols = w->t[i].cols;
    uint8_t* buf = (uint8_t*)mallocCheck((size_t)maxcols * 4);
    float* tmp = (float*)mallocCheck((size_t)maxcols * 4);
    for (int i = 0; i < w->n_t; i++) {
        const GgufWTensor* t = &w->t[i];
        const uint64_t rows = t->rows ? t->rows : 1, rb = gguf_row_bytes(t->type, t->cols);
        for (uint64_t r = 0; r < rows; r++) {
            gguf_encode_row(t, r, buf, tmp);
            fwriteCheck(buf, 1, (size_t)rb, fp, path);
        }
        write_zeros(fp, align_up(t->nbytes) - t->nbytes, path);
    }
    free(buf); free(tmp);
    atomic_commit(&af);
}
