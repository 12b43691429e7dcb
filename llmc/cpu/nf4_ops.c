// NF4 ops of the CPU backend (llmc/ops/ops.h): the quantized tensor stays where it is on the host and
// dequantization is llmc/ops/nf4.c's, bit-exact with bitsandbytes.
#include "cpu/ops_cpu.h"
#include "base/check.h"
#include <stdlib.h>

struct Nf4Op {
    const NF4Tensor* t;    // borrowed, or &view
    int64_t cols;          // n / shape[0]
    const NF4Tensor* meta; // a view's description (nf4_op_view)
    NF4Tensor view;        // a view's arrays in the image it is bound to
};

Nf4Op* cpu_nf4_op_upload(const NF4Tensor* t) {
    Nf4Op* d = (Nf4Op*)callocCheck(1, sizeof(Nf4Op));
    d->t = t;
    d->cols = t->ndim >= 1 && t->shape[0] > 0 ? t->n / t->shape[0] : t->n;
    return d;
}

Nf4Op* cpu_nf4_op_view(const NF4Tensor* t) {
    Nf4Op* d = cpu_nf4_op_upload(t);
    d->meta = t;
    d->t = NULL; // until bound
    return d;
}

void cpu_nf4_op_bind(Nf4Op* d, const void* image) {
    if (!d->meta) fatal("this is a bug in llmc", "nf4_op_bind on a handle that is not a view");
    nf4_image_view(&d->view, d->meta, (const uint8_t*)image);
    d->t = &d->view;
}

void cpu_nf4_op_free(Nf4Op* d) { free(d); }

size_t cpu_nf4_op_bytes(const Nf4Op* d) { (void)d; return 0; }

void cpu_nf4_dequantize_op(float* out, const Nf4Op* d, size_t row_begin, size_t rows) {
    // floatX is float here: dequantize straight into the scratch buffer
    nf4_dequantize_range(d->t, (int64_t)row_begin * d->cols, (int64_t)(row_begin + rows) * d->cols, out);
}
