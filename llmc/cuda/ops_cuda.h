// The CUDA backend (bf16 storage, fp32 accumulation, cuBLASLt and our own kernels): every function
// of llmc/ops/ops.h and llmc/ops/device.h under the cuda_ prefix, with its element type spelled out
// (__nv_bfloat16: floatX on this backend), so that this backend can sit in one program next to
// the CPU backend (the op tests compare the two). llmc/cuda/dispatch.cu gives the neutral names
// to a CUDA build; the contracts are ops.h's. C++ (nvcc, or g++ with the CUDA headers); the
// pointers are device memory. The files split the ops as ops.h's groups (and llmc/cpu/) do.
#ifndef LLMC_CUDA_OPS_CUDA_H
#define LLMC_CUDA_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_bf16.h>
#include "ops/ops.h"
#include "ops/device.h"

extern "C" {

// ---- backend lifetime, capabilities and memory (backend.cu)
void cuda_ops_init(int threads);
const char* cuda_ops_backend_name(void);
OpsCaps cuda_ops_caps(void);
void* cuda_ops_alloc(size_t bytes);
void cuda_ops_free(void* p);
void cuda_ops_zero(void* p, size_t bytes);
void* cuda_ops_alloc_host(size_t bytes);
void cuda_ops_free_host(void* p);
void cuda_ops_to_device(void* dst, const void* src_host, size_t bytes);
void cuda_ops_memcpy(void* dst, const void* src, size_t bytes);
void cuda_ops_to_host(void* dst_host, const void* src, size_t bytes);
void cuda_ops_to_device_async(void* dst, const void* src_host, size_t bytes);
void cuda_ops_copy_begin(void);
void cuda_ops_copy(void* dst, const void* src, size_t bytes, int to_host);
int cuda_ops_copy_mark(void);
void cuda_ops_copy_wait(int mark);
void cuda_ops_copy_end(void);
void cuda_ops_upload_f32(__nv_bfloat16* dst, const float* src_host, size_t n);
void cuda_ops_download_f32(float* dst_host, const __nv_bfloat16* src, size_t n);
void cuda_ops_synchronize(void);
void cuda_ops_set_deterministic(int on);   // (attention.cu: every op is deterministic; a no-op)

// ---- device selection and device collectives, llmc/ops/device.h (device.cu)
void cuda_device_select(const Comm* c);
void cuda_device_attach(Comm* c);
void cuda_device_detach(Comm* c);
int cuda_device_memory(size_t* free_bytes, size_t* total_bytes);

// ---- embeddings (encoder.cu)
void cuda_encoder_forward(__nv_bfloat16* out, const int* inp, const __nv_bfloat16* wte,
                          const __nv_bfloat16* wpe, const int* pos, int B, int T, int C);
// (the tokens and the positions, or NULL, in host memory: the backward groups the rows of each
// token and position on the host)
void cuda_encoder_backward(__nv_bfloat16* dwte, __nv_bfloat16* dwpe, const __nv_bfloat16* dout,
                           const int* inp_host, const int* pos_host, int B, int T, int C);

// ---- layernorm (layernorm.cu)
void cuda_layernorm_forward(__nv_bfloat16* out, float* mean, float* rstd, const __nv_bfloat16* inp,
                            const __nv_bfloat16* weight, const __nv_bfloat16* bias, int N, int C);
void cuda_layernorm_backward(__nv_bfloat16* dinp, __nv_bfloat16* dweight, __nv_bfloat16* dbias,
                             const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                             const __nv_bfloat16* weight, const float* mean, const float* rstd,
                             int N, int C, int accumulate);
void cuda_fused_residual_layernorm_forward(__nv_bfloat16* residual_out, __nv_bfloat16* ln_out,
                                           float* mean, float* rstd, const __nv_bfloat16* a,
                                           const __nv_bfloat16* b, const __nv_bfloat16* weight,
                                           const __nv_bfloat16* bias, int N, int C);

// ---- matmul (matmul.cu, gemm.cu)
void cuda_matmul_forward(__nv_bfloat16* out, __nv_bfloat16* gelu_out, const __nv_bfloat16* inp,
                         const __nv_bfloat16* weight, const __nv_bfloat16* bias, int N, int C,
                         int OC);
void cuda_matmul_forward_acc(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                             int N, int C, int OC);
void cuda_matmul_backward(__nv_bfloat16* dinp, __nv_bfloat16* dweight, __nv_bfloat16* dbias,
                          const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                          const __nv_bfloat16* weight, int N, int C, int OC, int accumulate);
void cuda_matmul_backward_gelu(__nv_bfloat16* dpre, __nv_bfloat16* dweight, __nv_bfloat16* dbias,
                               const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                               const __nv_bfloat16* pre, const __nv_bfloat16* weight, int N, int C,
                               int OC);

// ---- element-wise (elementwise.cu)
void cuda_gelu_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, size_t n);
void cuda_gelu_backward(__nv_bfloat16* dinp, const __nv_bfloat16* inp, const __nv_bfloat16* dout,
                        size_t n, int accumulate);
void cuda_residual_forward(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b,
                           size_t n);
void cuda_add_inplace(__nv_bfloat16* dst, const __nv_bfloat16* src, size_t n);
void cuda_scale_copy(__nv_bfloat16* dst, const __nv_bfloat16* src, float scale, size_t n);
void cuda_dropout_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, size_t n, float p,
                          uint64_t seed, uint64_t stream);
void cuda_mul_inplace(__nv_bfloat16* dst, const __nv_bfloat16* mask, size_t n);
void cuda_rows_copy(void* dst, const void* src, const int* idx, int K, size_t row_bytes, int scatter);

// ---- Q8_0 weights (q8.cu)
void cuda_matmul_forward_q8(__nv_bfloat16* out, __nv_bfloat16* gelu_out, const __nv_bfloat16* inp, const uint8_t* w,
                            const __nv_bfloat16* bias, int N, int C, int OC);
// ---- DoRA (dora.cu)
void cuda_dora_norm(float* norm, const __nv_bfloat16* W, const __nv_bfloat16* A, const __nv_bfloat16* B,
                    float scaling, int OC, int C, int R);
void cuda_dora_scale(__nv_bfloat16* out, const __nv_bfloat16* in, const __nv_bfloat16* m, const float* norm,
                     float shift, const __nv_bfloat16* bias, int N, int OC, int accumulate);
void cuda_dora_magnitude_backward(__nv_bfloat16* dm, const __nv_bfloat16* dout, const __nv_bfloat16* z,
                                  const float* norm, int N, int OC);

// ---- attention (attention.cu, attention_simple.cu)
// doc_start: NULL (plain causal attention, ops.h's contract), or packed sequences: device (B, T)
// int32, for each position the first position of its record (non-decreasing along a row, and
// doc_start[t] <= t); query t then sees keys doc_start[t] <= k <= t only.
void cuda_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                            const int* doc_start, int B, int T, int C, int NH);
void cuda_attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                             const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                             const int* doc_start, int B, int T, int C, int NH, int accumulate);
size_t cuda_attention_scratch_bytes(int B, int T, int C, int NH, int backward);
void cuda_attention_reserve(int B, int T, int C, int NH, int backward);

// ---- attention over a key/value cache (attention_kv.cu)
void cuda_attention_forward_kv(__nv_bfloat16* out, const __nv_bfloat16* qkv_new,
                               __nv_bfloat16* kcache, __nv_bfloat16* vcache, int B, int pos, int Tn,
                               int maxT, int C, int NH);

// ---- classifier (classifier.cu)
void cuda_fused_classifier(float* losses, __nv_bfloat16* logits, const int* targets, float dloss,
                           int N, int V, int Vp);
int cuda_classifier_rows(int N);
void cuda_classifier_train(float* losses, __nv_bfloat16* dx, __nv_bfloat16* dw, __nv_bfloat16* logits,
                           const __nv_bfloat16* x, const __nv_bfloat16* w, const int* targets, float dloss,
                           int N, int C, int V, int Vp);
void cuda_classifier_train_rows(float* losses, __nv_bfloat16* dx, __nv_bfloat16* dw, __nv_bfloat16* logits,
                                const __nv_bfloat16* x, const __nv_bfloat16* w, const int* targets, const float* dloss_rows,
                                int N, int C, int V, int Vp);

// ---- optimizer (adamw.cu)
void cuda_adamw_update(__nv_bfloat16* params, float* master, const __nv_bfloat16* grads, float* m,
                       float* v, size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, int t, uint32_t seed);

// ---- reductions (reduce.cu)
double cuda_sum_squares(const __nv_bfloat16* x, size_t n);
double cuda_sum_f32(const float* x, size_t n);
void cuda_sum_squares_acc(double* acc, const __nv_bfloat16* x, size_t n);
void cuda_sum_f32_acc(double* acc, const float* x, size_t n);
void cuda_seq_logp_sums(double* out, const float* losses, const int* ranges, int S);

// ---- NF4 frozen base weights (nf4_ops.cu, nf4.cu)
Nf4Op* cuda_nf4_op_upload(const NF4Tensor* t);
void cuda_nf4_op_free(Nf4Op* d);
size_t cuda_nf4_op_bytes(const Nf4Op* d);
Nf4Op* cuda_nf4_op_view(const NF4Tensor* t);
void cuda_nf4_op_bind(Nf4Op* d, const void* image);
void cuda_nf4_dequantize_op(__nv_bfloat16* out, const Nf4Op* t, size_t row_begin, size_t rows);
} // extern "C"
#endif // LLMC_CUDA_OPS_CUDA_H
