// The CPU backend (fp32 storage, OpenMP across rows/columns; GEMMs in fp32 through OpenBLAS or, with
// ops_set_gemm_dtype(OPS_BF16 / OPS_F16) = --dtype bf16 / fp16, in that format with fp32
// accumulation (oneDNN; fp16 widened to fp32): operands rounded at the GEMM as torch.autocast does, floatX stays fp32; docs/CPU.md has the
// design and the measurements behind it): every function of llmc/ops/ops.h
// and llmc/ops/device.h under the cpu_ prefix, with its element type spelled out (float: floatX is
// float on this backend), so that this backend can sit in one program next to another (the CUDA
// op tests compare the two). llmc/cpu/dispatch.c gives the neutral names to a CPU build; the
// contracts are ops.h's. The files split the ops as ops.h's groups (and llmc/cuda/) do.
#ifndef LLMC_CPU_OPS_CPU_H
#define LLMC_CPU_OPS_CPU_H

#include <stddef.h>
#include <stdint.h>
#include "ops/ops.h"
#include "ops/device.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- backend lifetime, capabilities and memory (backend.c)
void cpu_ops_init(int threads);
const char* cpu_ops_backend_name(void);
OpsCaps cpu_ops_caps(void);
void* cpu_ops_alloc(size_t bytes);
void cpu_ops_free(void* p);
void cpu_ops_zero(void* p, size_t bytes);
void cpu_ops_to_device(void* dst, const void* src_host, size_t bytes);
void cpu_ops_to_host(void* dst_host, const void* src, size_t bytes);
void cpu_ops_memcpy(void* dst, const void* src, size_t bytes);
void cpu_ops_to_device_async(void* dst, const void* src_host, size_t bytes);
void cpu_ops_copy(void* dst, const void* src, size_t bytes);
void cpu_ops_upload_f32(float* dst, const float* src_host, size_t n);
void cpu_ops_download_f32(float* dst_host, const float* src, size_t n);
void cpu_ops_synchronize(void);
void cpu_ops_set_deterministic(int on);
void cpu_ops_set_gemm_dtype(OpsDtype d);   // (matmul.c)
OpsDtype cpu_ops_gemm_dtype(void);
// Bytes the bf16 GEMMs' operand scratch holds now (matmul.c's three slots; classifier.c's bf16
// lm_head): what the memory plan counts as the backend's workspace (llmc/plan/memplan.h).
size_t cpu_ops_gemm_scratch_bytes(void);
size_t cpu_classifier_scratch_bytes(void);
// Whether bf16 GEMMs run natively here (AVX512-BF16 or AMX-BF16), with why: the hardware alone
// (cpu_ops_bf16_hw), or as --dtype auto takes it (cpu_ops_bf16_native): no with LLMC_CPU_BF16=0 in
// the environment, which makes a bf16 CPU run as an fp32-only one does (docs/CPU.md).
// cpu_ops_bf16_off: that variable's value says so (0; 1 or unset: no; anything else is fatal).
int cpu_ops_bf16_hw(const char** why);
int cpu_ops_bf16_native(const char** why);
int cpu_ops_bf16_off(const char* value);

// ---- device selection, llmc/ops/device.h (backend.c: one device, the host)
void cpu_device_select(const Comm* c);
void cpu_device_attach(Comm* c);
void cpu_device_detach(Comm* c);
int cpu_device_memory(size_t* free_bytes, size_t* total_bytes);

// ---- embeddings (encoder.c)
void cpu_encoder_forward(float* out, const int* inp, const float* wte, const float* wpe,
                         const int* pos, int B, int T, int C);
void cpu_encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp,
                          const int* pos, int B, int T, int C);

// ---- layernorm (layernorm.c)
void cpu_layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                           const float* weight, const float* bias, int N, int C);
void cpu_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, const float* mean,
                            const float* rstd, int N, int C, int accumulate);
void cpu_fused_residual_layernorm_forward(float* residual_out, float* ln_out, float* mean,
                                          float* rstd, const float* a, const float* b,
                                          const float* weight, const float* bias, int N, int C);

// ---- matmul (matmul.c)
void cpu_matmul_forward(float* out, float* gelu_out, const float* inp, const float* weight,
                        const float* bias, int N, int C, int OC);
void cpu_matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, int N, int C, int OC, int accumulate);
void cpu_matmul_backward_gelu(float* dpre, float* dweight, float* dbias, const float* dout,
                              const float* inp, const float* pre, const float* weight, int N, int C,
                              int OC);
void cpu_matmul_forward_acc(float* out, const float* inp, const float* weight, int N, int C, int OC);
void cpu_matmul_forward_w16(float* out, float* gelu_out, const float* inp, const uint16_t* weight,
                            const float* bias, int N, int C, int OC);
void cpu_matmul_backward_w16(float* dinp, float* dbias, const float* dout, const uint16_t* weight,
                             int N, int C, int OC, int accumulate);
// out += bias, then gelu_out = gelu(out) where given: the forward GEMMs' epilogue (matmul.c)
void cpu_matmul_epilogue(float* out, float* gelu_out, const float* bias, int N, int OC);
// ---- Q8_0 weights (q8.c)
void cpu_matmul_forward_q8(float* out, float* gelu_out, const float* inp, const uint8_t* weight,
                           const float* bias, int N, int C, int OC);
// 1: the few-row product in plain C on any CPU (what a CPU without AVX-512 runs), for the tests
void cpu_q8_force_scalar(int on);

// ---- element-wise (elementwise.c)
void cpu_gelu_forward(float* out, const float* inp, size_t n);
void cpu_gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, int accumulate);
void cpu_residual_forward(float* out, const float* a, const float* b, size_t n);
void cpu_add_inplace(float* dst, const float* src, size_t n);
void cpu_scale_copy(float* dst, const float* src, float scale, size_t n);
void cpu_dropout_forward(float* out, const float* inp, size_t n, float p, uint64_t seed,
                         uint64_t stream);
void cpu_mul_inplace(float* dst, const float* mask, size_t n);
void cpu_rows_copy(void* dst, const void* src, const int* idx, int K, size_t row_bytes, int scatter);

// ---- DoRA (dora.c)
void cpu_dora_norm(float* norm, const float* W, const uint16_t* W16, const float* A, const float* B, float scaling,
                   int OC, int C, int R);
void cpu_dora_scale(float* out, const float* in, const float* m, const float* norm, float shift, const float* bias,
                    int N, int OC, int accumulate);
void cpu_dora_magnitude_backward(float* dm, const float* dout, const float* z, const float* norm, int N, int OC);

// ---- attention (attention.c)
void cpu_attention_forward(float* out, float* lse, const float* qkv, const int* doc_start, int B,
                           int T, int C, int NH);
void cpu_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, const int* doc_start, int B, int T, int C, int NH,
                            int accumulate);
size_t cpu_attention_scratch_bytes(int B, int T, int C, int NH, int backward);
void cpu_attention_reserve(int B, int T, int C, int NH, int backward);

// ---- attention over a key/value cache (attention_kv.c)
// (the caches: fp32 k32 / v32, or bf16 k16 / v16, the others NULL)
void cpu_attention_forward_kv(float* out, const float* qkv_new, float* k32, float* v32, uint16_t* k16, uint16_t* v16,
                              int B, int pos, int Tn, int maxT, int C, int NH);

// ---- classifier (classifier.c)
void cpu_fused_classifier(float* losses, float* logits, const int* targets, float dloss, int N,
                          int V, int Vp);
int cpu_classifier_rows(int N);
// w16: w in bf16 already (ops.h classifier_train), used by the bf16 GEMMs; NULL: w rounded per call
void cpu_classifier_train(float* losses, float* dx, float* dw, float* logits, const float* x, const float* w,
                          const uint16_t* w16, const int* targets, float dloss, int N, int C, int V, int Vp);
void cpu_classifier_train_rows(float* losses, float* dx, float* dw, float* logits, const float* x, const float* w,
                               const uint16_t* w16, const int* targets, const float* dloss_rows, int N, int C, int V, int Vp);

// ---- optimizer (adamw.c)
void cpu_adamw_update(float* params, float* master, const float* grads, float* m, float* v,
                      size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                      float grad_scale, int t, uint32_t seed);

// ---- reductions (reduce.c)
double cpu_sum_squares(const float* x, size_t n);
double cpu_sum_f32(const float* x, size_t n);
void cpu_sum_squares_acc(double* acc, const float* x, size_t n);
void cpu_sum_f32_acc(double* acc, const float* x, size_t n);
void cpu_seq_logp_sums(double* out, const float* losses, const int* ranges, int S);

// ---- NF4 frozen base weights (nf4_ops.c)
Nf4Op* cpu_nf4_op_upload(const NF4Tensor* t);
void cpu_nf4_op_free(Nf4Op* d);
size_t cpu_nf4_op_bytes(const Nf4Op* d);
Nf4Op* cpu_nf4_op_view(const NF4Tensor* t);
void cpu_nf4_op_bind(Nf4Op* d, const void* image);
void cpu_nf4_dequantize_op(float* out, const Nf4Op* t, size_t row_begin, size_t rows);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CPU_OPS_CPU_H
