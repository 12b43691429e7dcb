// safetensors reader (llmc/base/safetensors.c): the input is the file. st_try_open validates it (no
// fatal); every tensor it accepts must lie inside the file and read without error, as raw bytes
// and converted to fp32 (float dtypes) or int32 (integer dtypes that always fit).
#include "fuzz.h"
#include "base/safetensors.h"

static void read_all(size_t file_size) {
    StFile f;
    char err[1024];
    if (st_try_open(&f, fuzz_path("x.safetensors"), err, sizeof(err)) != 0) return;
    uint64_t sum = 0;
    for (int i = 0; i < f.n_tensors; i++) {
        const StTensor* t = &f.tensors[i];
        if (st_find(&f, t->name) != t) abort();
        if (t->end < t->begin || f.data_start + t->end > file_size) abort(); // accepted a tensor outside the file
        size_t bytes = (size_t)(t->end - t->begin);
        void* raw = malloc(bytes ? bytes : 1);
        st_read_raw(&f, t, raw);
        free(raw);
        size_t n = (size_t)t->numel;
        if (t->dtype == ST_F32 || t->dtype == ST_BF16 || t->dtype == ST_F16 || t->dtype == ST_F64) {
            float* x = (float*)malloc((n ? n : 1) * sizeof(float));
            st_read_f32(&f, t, x);
            free(x);
        } else if (t->dtype != ST_I64) { // I64 values may not fit in int32: that is a fatal() by design
            int32_t* x = (int32_t*)malloc((n ? n : 1) * sizeof(int32_t));
            st_read_i32(&f, t, x);
            free(x);
        }
        sum += t->numel;
    }
    for (int i = 0; i < f.n_meta; i++) if (st_meta(&f, f.meta_keys[i]) == NULL) abort();
    (void)sum;
    st_close(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_setup();
    fuzz_write("x.safetensors", data, size);
    read_all(size);
    return 0;
}
