// safetensors reader and writer (the rules: docs/FORMATS.md). The reader validates
// every rule before any tensor is used and names the file and the broken rule on failure.
#ifndef LLMC_SAFETENSORS_H
#define LLMC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "base/fileio.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ST_F32, ST_BF16, ST_F16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL, ST_NUM_DTYPES } StDtype;

#define ST_MAX_DIMS 8

typedef struct {
    char* name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;   // byte offsets relative to the data buffer
    uint64_t numel;
} StTensor;

typedef struct {
    char path[LLMC_PATH_MAX];
    FILE* fp;
    uint64_t header_len;   // N
    uint64_t data_start;   // 8 + N
    int n_tensors;
    StTensor* tensors;     // sorted by name
    int n_meta;
    char** meta_keys;      // __metadata__ (string values only)
    char** meta_values;
} StFile;

const char* st_dtype_name(StDtype d);

// Open and validate; fatal with "'<path>': <rule>" on any violation.
void st_open(StFile* f, const char* path);
// Like st_open but returns -1 and writes the message into err instead of exiting (for tests
// and for format sniffing). 0 on success.
int st_try_open(StFile* f, const char* path, char* err, size_t errcap);
void st_close(StFile* f);
// Find a tensor by name, NULL if absent.
const StTensor* st_find(const StFile* f, const char* name);
const char* st_meta(const StFile* f, const char* key); // NULL if absent
// Read a tensor's raw bytes (numel * dtype size) into dst.
void st_read_raw(StFile* f, const StTensor* t, void* dst);
// Read a tensor converting F32/BF16/F16/F64 to fp32 (fatal for integer dtypes).
void st_read_f32(StFile* f, const StTensor* t, float* dst);
// Read an integer tensor (I32/I64/I16/I8/U8/BOOL) into int32 (fatal if a value does not fit).
void st_read_i32(StFile* f, const StTensor* t, int32_t* dst);

// Writer: collect tensors (the data pointers must stay valid until st_writer_save), then save
// atomically. Adds __metadata__ {"format": "pt"} plus any st_writer_meta entries, pads the
// header with spaces so the data starts 8-byte aligned, lays tensors out in the order added.
typedef struct StWriterEntry StWriterEntry;
typedef struct {
    StWriterEntry* entries;
    int n, cap;
    char** meta_kv; // alternating key, value
    int n_meta;
} StWriter;

void st_writer_init(StWriter* w);
void st_writer_add(StWriter* w, const char* name, StDtype dtype, int ndim, const int64_t* shape, const void* data);
// Like st_writer_add, but the bytes are produced at save time, chunk by chunk, by
// fill(ctx, dst, first, count): write elements [first, first + count) of the tensor (in file
// order, count * dtype size bytes) into dst. Lets a saver transpose or convert large tensors
// without a full-size temporary copy.
typedef void (*StFillFn)(void* ctx, void* dst, uint64_t first, uint64_t count);
// Elements per fill call (and per chunk of a read): st_writer_save fills one buffer of at most this
// many at a time (the memory plan counts it, llmc/plan/memplan.c).
#define ST_CHUNK_ELEMS (1u << 20)
void st_writer_add_fn(StWriter* w, const char* name, StDtype dtype, int ndim, const int64_t* shape,
                      StFillFn fill, void* ctx);
void st_writer_meta(StWriter* w, const char* key, const char* value);
void st_writer_save(StWriter* w, const char* path);
void st_writer_free(StWriter* w);

#ifdef __cplusplus
}
#endif
#endif // LLMC_SAFETENSORS_H
