// GGUF (version 3), the file format of llama.cpp and everything built on it: a reader and a
// writer of the container, and the tensor encodings the tool writes (F32, F16, BF16, Q8_0). The
// rules the reader enforces, and the layout, are in docs/FORMATS.md ("GGUF"). What goes into a
// GPT-2 model or LoRA adapter file is llmc/model/gguf_io.h's business, not this file's.
//
// The reader validates everything before a tensor is used, the same way as the safetensors reader:
// every count, length and offset is checked against the file's size before anything is allocated
// or read, so a hostile or truncated file costs at most its own size in memory and is refused with
// a message naming the file and the broken rule.
#ifndef LLMC_GGUF_H
#define LLMC_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "base/fileio.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GGUF_MAGIC "GGUF"
#define GGUF_VERSION 3
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4        // ggml's GGML_MAX_DIMS
#define GGUF_MAX_NAME 63       // ggml's GGML_MAX_NAME - 1: longer tensor names are refused by llama.cpp
#define GGUF_QK8_0 32          // values per Q8_0 block
#define GGUF_Q8_0_BYTES 34     // fp16 scale + 32 int8

// Metadata value types (the numbers are the file's).
typedef enum {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6,
    GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
    GGUF_NUM_VALUE_TYPES
} GgufValueType;

// Tensor types this tool reads and writes (ggml's numbers); every other ggml type is refused.
typedef enum { GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q8_0 = 8, GGML_TYPE_BF16 = 30 } GgmlType;

const char* gguf_type_name(uint32_t ggml_type);          // "F32", "Q8_0", ... or "type N"
const char* gguf_value_type_name(uint32_t value_type);   // "u32", "string", ...
// Bytes of a row of n values of type (n a multiple of the block size); 0 for an unknown type.
uint64_t gguf_row_bytes(uint32_t ggml_type, uint64_t n);

// Q8_0, exactly as ggml's reference quantizer (quantize_row_q8_0_ref) computes it: per block of
// 32, d = max|x| / 127, q = roundf(x * (1/d)) (0 for an all-zero block), the scale stored as fp16
// (round to nearest even). n must be a multiple of 32; out gets n / 32 * 34 bytes.
void gguf_quantize_q8_0(const float* x, uint8_t* out, size_t n);
void gguf_dequantize_q8_0(const uint8_t* in, float* x, size_t n);

// ---------------------------------------------------------------------------------------------
// reader

typedef struct {
    char* key;
    uint32_t type;            // GgufValueType
    uint32_t arr_type;        // element type of an array
    uint64_t n;               // array length (1 for a scalar)
    uint64_t u; int64_t i; double f;  // a numeric or bool scalar, in each form that holds it exactly
    char* str;                // a string scalar (NUL-terminated; strings with a NUL byte are refused)
    char** strs;              // an array of strings
    void* arr;                // an array of numbers: n raw little-endian values
} GgufKV;

typedef struct {
    char* name;
    int ndim;
    int64_t ne[GGUF_MAX_DIMS]; // ggml order: ne[0] is the innermost (contiguous) dimension
    uint32_t type;
    uint64_t offset;           // from the start of the data section
    uint64_t nbytes;
    uint64_t numel;
} GgufTensor;

typedef struct {
    char path[LLMC_PATH_MAX];
    FILE* fp;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_start;       // file offset of the data section
    int64_t n_kv, n_tensors;
    GgufKV* kv;                // in file order
    GgufTensor* tensors;       // in file order
} GgufFile;

// Open and validate; 0, or -1 with "'<path>': <rule>" in err (nothing left open).
int gguf_try_open(GgufFile* f, const char* path, char* err, size_t errcap);
// The same, fatal on failure.
void gguf_open(GgufFile* f, const char* path);
void gguf_close(GgufFile* f);
// 1 if the file at path starts with the GGUF magic (a sniff, not a validation).
int gguf_is_gguf(const char* path);

const GgufKV* gguf_kv(const GgufFile* f, const char* key);          // NULL if absent
const char* gguf_kv_str(const GgufFile* f, const char* key);       // NULL if absent or not a string
// An integer scalar (any integer type, or bool) that fits in int64; 0, or -1 if absent / another type.
int gguf_kv_int(const GgufFile* f, const char* key, int64_t* out);
// A float or integer scalar as a double; 0 or -1.
int gguf_kv_num(const GgufFile* f, const char* key, double* out);
const GgufTensor* gguf_tensor(const GgufFile* f, const char* name); // NULL if absent
// The tensor's bytes as stored (t->nbytes) / as fp32 (t->numel values, dequantized); fatal on an
// I/O error.
void gguf_read_raw(GgufFile* f, const GgufTensor* t, void* dst);
void gguf_read_f32(GgufFile* f, const GgufTensor* t, float* dst);

// ---------------------------------------------------------------------------------------------
// writer: metadata and tensors are collected, then written in one go, atomically (temp file,
// fsync, rename). Tensor data pointers must stay valid until gguf_writer_save; values are
// converted from fp32 into the tensor's type while writing. Data is aligned to 32 bytes.

typedef struct GgufWriter GgufWriter;

GgufWriter* gguf_writer_new(void);
void gguf_writer_free(GgufWriter* w);
// Metadata, in the order added; a key given twice is a bug (fatal).
void gguf_set_str(GgufWriter* w, const char* key, const char* value);
void gguf_set_u32(GgufWriter* w, const char* key, uint32_t value);
void gguf_set_i32(GgufWriter* w, const char* key, int32_t value);
void gguf_set_f32(GgufWriter* w, const char* key, float value);
void gguf_set_bool(GgufWriter* w, const char* key, int value);
void gguf_set_str_array(GgufWriter* w, const char* key, const char* const* items, size_t n);
void gguf_set_i32_array(GgufWriter* w, const char* key, const int32_t* items, size_t n);
// A tensor of shape [rows, cols] in row-major (numpy) order, i.e. ne = {cols, rows} (cols only
// when rows == 0: a 1-D tensor), from fp32 data written as `type`. Q8_0 needs cols % 32 == 0.
// scale != 1: every value is multiplied by it (in fp32) before encoding.
void gguf_add_tensor(GgufWriter* w, const char* name, GgmlType type, uint64_t rows, uint64_t cols,
                     const float* data, float scale);
void gguf_writer_save(GgufWriter* w, const char* path);

#ifdef __cplusplus
}
#endif
#endif // LLMC_GGUF_H
