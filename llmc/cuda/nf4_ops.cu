// NF4 ops of the CUDA backend (llmc/ops/ops.h): a quantized frozen weight lives on the device as one
// allocation (nf4_device_upload) and is dequantized to bf16 by the kernels of llmc/cuda/nf4.cu,
// bit-equal to the CPU dequantization rounded to nearest even. Work goes on the legacy default
// stream (0), which orders it with the backend's other work on blocking streams.
#include "nf4.cuh"
#include "ops_cuda.h"

struct Nf4Op {
    NF4Device d;
    int64_t cols;          // n / shape[0]
    size_t bytes;          // device bytes owned (0: a view)
    const NF4Tensor* meta; // a view's description (nf4_op_view)
};

extern "C" Nf4Op* cuda_nf4_op_upload(const NF4Tensor* t) {
    Nf4Op* op = (Nf4Op*)callocCheck(1, sizeof(Nf4Op));
    nf4_device_upload(&op->d, t);
    op->cols = t->ndim >= 1 && t->shape[0] > 0 ? t->n / t->shape[0] : t->n;
    op->bytes = nf4_device_bytes(t);
    return op;
}

extern "C" void cuda_nf4_op_free(Nf4Op* op) {
    if (!op) return;
    if (!op->meta) nf4_device_free(&op->d);
    free(op);
}

extern "C" Nf4Op* cuda_nf4_op_view(const NF4Tensor* t) {
    Nf4Op* op = (Nf4Op*)callocCheck(1, sizeof(Nf4Op));
    op->meta = t;
    op->d.n = t->n;
    op->cols = t->ndim >= 1 && t->shape[0] > 0 ? t->n / t->shape[0] : t->n;
    return op;
}

extern "C" void cuda_nf4_op_bind(Nf4Op* op, const void* image) {
    if (!op->meta) fatal("this is a bug in llmc", "nf4_op_bind on a handle that is not a view");
    nf4_device_view(&op->d, op->meta, (const uint8_t*)image);
}

extern "C" size_t cuda_nf4_op_bytes(const Nf4Op* op) { return op ? op->bytes : 0; }

extern "C" void cuda_nf4_dequantize_op(floatX* out, const Nf4Op* op, size_t row_begin, size_t rows) {
    nf4_dequantize_cuda(out, &op->d, (int64_t)row_begin * op->cols, (int64_t)(row_begin + rows) * op->cols, 0);
}
