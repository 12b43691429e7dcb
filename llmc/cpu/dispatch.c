// The CPU backend's dispatch: the neutral names of llmc/ops/ops.h and llmc/ops/device.h for a CPU build,
// each a call of its cpu_ implementation (llmc/cpu/ops_cpu.h). The only file of the backend that
// defines them (why prefixes and dispatch: llmc/ops/ops.h).
#include "cpu/ops_cpu.h"
#include "cpu/profile.h"

// ---- backend lifetime, capabilities and memory
void ops_init(int threads) { cpu_ops_init(threads); }
const char* ops_backend_name(void) { return cpu_ops_backend_name(); }
OpsCaps ops_caps(void) { return cpu_ops_caps(); }
void* ops_alloc(size_t bytes) { return cpu_ops_alloc(bytes); }
void ops_free(void* p) { cpu_ops_free(p); }
void ops_zero(void* p, size_t bytes) { CPU_PROF("ops_zero", 0, 0, cpu_ops_zero(p, bytes)); }
void* ops_alloc_host(size_t bytes) { return cpu_ops_alloc(bytes); }
void ops_free_host(void* p) { cpu_ops_free(p); }
void ops_to_device(void* dst, const void* src_host, size_t bytes) {
    cpu_ops_to_device(dst, src_host, bytes);
}
void ops_to_host(void* dst_host, const void* src, size_t bytes) {
    cpu_ops_to_host(dst_host, src, bytes);
}
void ops_memcpy(void* dst, const void* src, size_t bytes) { cpu_ops_memcpy(dst, src, bytes); }
void ops_to_device_async(void* dst, const void* src_host, size_t bytes) {
    cpu_ops_to_device_async(dst, src_host, bytes);
}
void ops_copy_begin(void) {}
void ops_copy_to_host(void* dst_host, const void* src, size_t bytes) { cpu_ops_copy(dst_host, src, bytes); }
void ops_copy_to_device(void* dst, const void* src_host, size_t bytes) { cpu_ops_copy(dst, src_host, bytes); }
int ops_copy_mark(void) { return 0; }
void ops_copy_wait(int mark) { (void)mark; }
void ops_copy_end(void) {}
void ops_upload_f32(floatX* dst, const float* src_host, size_t n) {
    cpu_ops_upload_f32(dst, src_host, n);
}
void ops_download_f32(float* dst_host, const floatX* src, size_t n) {
    cpu_ops_download_f32(dst_host, src, n);
}
void ops_synchronize(void) { cpu_ops_synchronize(); }
void ops_set_deterministic(int on) { cpu_ops_set_deterministic(on); }
void ops_profile(int on) { cpu_ops_profile(on); }
void ops_profile_print(long steps) { cpu_ops_profile_print(steps); }
void ops_set_gemm_dtype(OpsDtype d) { cpu_ops_set_gemm_dtype(d); }
OpsDtype ops_gemm_dtype(void) { return cpu_ops_gemm_dtype(); }
int ops_bf16_native(const char** why) { return cpu_ops_bf16_native(why); }

// ---- device selection and device collectives (llmc/ops/device.h)
void device_select(const Comm* c) { cpu_device_select(c); }
void device_attach(Comm* c) { cpu_device_attach(c); }
void device_detach(Comm* c) { cpu_device_detach(c); }
int device_memory(size_t* free_bytes, size_t* total_bytes) { return cpu_device_memory(free_bytes, total_bytes); }

// ---- embeddings
void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, const int* pos,
                     int B, int T, int C) {
    CPU_PROF("encoder_forward", 0, 0, cpu_encoder_forward(out, inp, wte, wpe, pos, B, T, C));
}
void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp,
                      const int* inp_host, const int* pos, const int* pos_host, int B, int T, int C) {
    (void)inp_host; (void)pos_host; // inp and pos are host memory here
    CPU_PROF("encoder_backward", 0, 0, cpu_encoder_backward(dwte, dwpe, dout, inp, pos, B, T, C));
}

// ---- layernorm
void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* weight, const floatX* bias, int N, int C) {
    CPU_PROF("layernorm_forward", 0, 0, cpu_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C));
}
void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout,
                        const floatX* inp, const floatX* weight, const float* mean,
                        const float* rstd, int N, int C, int accumulate) {
    CPU_PROF("layernorm_backward", 0, 0, cpu_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate));
}
void fused_residual_layernorm_forward(floatX* residual_out, floatX* ln_out, float* mean,
                                      float* rstd, const floatX* a, const floatX* b,
                                      const floatX* weight, const floatX* bias, int N, int C) {
    CPU_PROF("fused_residual_layernorm_forward", 0, 0, cpu_fused_residual_layernorm_forward(residual_out, ln_out, mean, rstd, a, b, weight, bias, N, C));
}

// ---- matmul
void matmul_forward(floatX* out, floatX* gelu_out, const floatX* inp, const floatX* weight,
                    const floatX* bias, int N, int C, int OC) {
    CPU_PROF("matmul_forward", C, OC, cpu_matmul_forward(out, gelu_out, inp, weight, bias, N, C, OC));
}
void matmul_forward_acc(floatX* out, const floatX* inp, const floatX* weight, int N, int C, int OC) {
    CPU_PROF("matmul_forward_acc", C, OC, cpu_matmul_forward_acc(out, inp, weight, N, C, OC));
}
void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout,
                     const floatX* inp, const floatX* weight, int N, int C, int OC, int accumulate) {
    CPU_PROF("matmul_backward", C, OC, cpu_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate));
}
void matmul_backward_gelu(floatX* dpre, floatX* dweight, floatX* dbias, const floatX* dout,
                          const floatX* inp, const floatX* pre, const floatX* weight, int N, int C, int OC) {
    CPU_PROF("matmul_backward_gelu", C, OC, cpu_matmul_backward_gelu(dpre, dweight, dbias, dout, inp, pre, weight, N, C, OC));
}
void matmul_forward_w16(floatX* out, floatX* gelu_out, const floatX* inp, const uint16_t* weight,
                        const floatX* bias, int N, int C, int OC) {
    CPU_PROF("matmul_forward_w16", C, OC, cpu_matmul_forward_w16(out, gelu_out, inp, weight, bias, N, C, OC));
}
void matmul_forward_q8(floatX* out, floatX* gelu_out, const floatX* inp, const uint8_t* weight,
                       const floatX* bias, int N, int C, int OC) {
    CPU_PROF("matmul_forward_q8", C, OC, cpu_matmul_forward_q8(out, gelu_out, inp, weight, bias, N, C, OC));
}
void matmul_backward_w16(floatX* dinp, floatX* dbias, const floatX* dout, const uint16_t* weight,
                         int N, int C, int OC, int accumulate) {
    CPU_PROF("matmul_backward_w16", C, OC, cpu_matmul_backward_w16(dinp, dbias, dout, weight, N, C, OC, accumulate));
}

// ---- element-wise
void gelu_forward(floatX* out, const floatX* inp, size_t n) { CPU_PROF("gelu_forward", 0, 0, cpu_gelu_forward(out, inp, n)); }
void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, int accumulate) {
    CPU_PROF("gelu_backward", 0, 0, cpu_gelu_backward(dinp, inp, dout, n, accumulate));
}
void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n) {
    CPU_PROF("residual_forward", 0, 0, cpu_residual_forward(out, a, b, n));
}
void add_inplace(floatX* dst, const floatX* src, size_t n) { CPU_PROF("add_inplace", 0, 0, cpu_add_inplace(dst, src, n)); }
void scale_copy(floatX* dst, const floatX* src, float scale, size_t n) {
    CPU_PROF("scale_copy", 0, 0, cpu_scale_copy(dst, src, scale, n));
}
void dropout_forward(floatX* out, const floatX* inp, size_t n, float p, uint64_t seed,
                     uint64_t stream) {
    CPU_PROF("dropout_forward", 0, 0, cpu_dropout_forward(out, inp, n, p, seed, stream));
}
void mul_inplace(floatX* dst, const floatX* mask, size_t n) { CPU_PROF("mul_inplace", 0, 0, cpu_mul_inplace(dst, mask, n)); }
void rows_gather(void* dst, const void* src, const int* idx, int K, size_t row_bytes) {
    CPU_PROF("rows_gather", 0, 0, cpu_rows_copy(dst, src, idx, K, row_bytes, 0));
}
void rows_scatter(void* dst, const void* src, const int* idx, int K, size_t row_bytes) {
    CPU_PROF("rows_scatter", 0, 0, cpu_rows_copy(dst, src, idx, K, row_bytes, 1));
}

// ---- DoRA
void dora_norm(float* norm, const floatX* W, const floatX* A, const floatX* B, float scaling, int OC, int C, int R) {
    CPU_PROF("dora_norm", 0, 0, cpu_dora_norm(norm, W, NULL, A, B, scaling, OC, C, R));
}
void dora_norm_w16(float* norm, const uint16_t* W, const floatX* A, const floatX* B, float scaling, int OC, int C, int R) {
    CPU_PROF("dora_norm", 0, 0, cpu_dora_norm(norm, NULL, W, A, B, scaling, OC, C, R));
}
void dora_scale(floatX* out, const floatX* in, const floatX* m, const float* norm, float shift,
                const floatX* bias, int N, int OC, int accumulate) {
    CPU_PROF("dora_scale", 0, 0, cpu_dora_scale(out, in, m, norm, shift, bias, N, OC, accumulate));
}
void dora_magnitude_backward(floatX* dm, const floatX* dout, const floatX* z, const float* norm, int N, int OC) {
    CPU_PROF("dora_magnitude_backward", 0, 0, cpu_dora_magnitude_backward(dm, dout, z, norm, N, OC));
}

// ---- attention
void attention_forward(floatX* out, float* lse, const floatX* qkv, const int* doc_start, int B, int T,
                       int C, int NH) {
    CPU_PROF("attention_forward", 0, 0, cpu_attention_forward(out, lse, qkv, doc_start, B, T, C, NH));
}
void attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, const int* doc_start, int B, int T, int C, int NH, int accumulate) {
    CPU_PROF("attention_backward", 0, 0, cpu_attention_backward(dqkv, dout, qkv, out, lse, doc_start, B, T, C, NH, accumulate));
}
size_t attention_scratch_bytes(int B, int T, int C, int NH, int backward) {
    return cpu_attention_scratch_bytes(B, T, C, NH, backward);
}
void attention_reserve(int B, int T, int C, int NH, int backward) { cpu_attention_reserve(B, T, C, NH, backward); }

// ---- attention over a key/value cache
void attention_forward_kv(floatX* out, const floatX* qkv_new, floatX* kcache, floatX* vcache, int B,
                          int pos, int Tn, int maxT, int C, int NH) {
    CPU_PROF("attention_forward_kv", 0, 0, cpu_attention_forward_kv(out, qkv_new, kcache, vcache, NULL, NULL, B, pos, Tn, maxT, C, NH));
}
void attention_forward_kv16(floatX* out, const floatX* qkv_new, uint16_t* kcache, uint16_t* vcache, int B,
                            int pos, int Tn, int maxT, int C, int NH) {
    CPU_PROF("attention_forward_kv", 0, 0, cpu_attention_forward_kv(out, qkv_new, NULL, NULL, kcache, vcache, B, pos, Tn, maxT, C, NH));
}

// ---- classifier
void fused_classifier(float* losses, floatX* logits, const int* targets, float dloss, int N, int V,
                      int Vp) {
    CPU_PROF("fused_classifier", 0, 0, cpu_fused_classifier(losses, logits, targets, dloss, N, V, Vp));
}
int classifier_rows(int N) { return cpu_classifier_rows(N); }
void classifier_train(float* losses, floatX* dx, floatX* dw, floatX* logits, const floatX* x, const floatX* w,
                      const uint16_t* w16, const int* targets, float dloss, int N, int C, int V, int Vp) {
    CPU_PROF("classifier_train", C, Vp, cpu_classifier_train(losses, dx, dw, logits, x, w, w16, targets, dloss, N, C, V, Vp));
}
void classifier_train_rows(float* losses, floatX* dx, floatX* dw, floatX* logits, const floatX* x, const floatX* w,
                           const uint16_t* w16, const int* targets, const float* dloss_rows, int N, int C, int V, int Vp) {
    CPU_PROF("classifier_train", C, Vp, cpu_classifier_train_rows(losses, dx, dw, logits, x, w, w16, targets, dloss_rows, N, C, V, Vp));
}

// ---- optimizer
void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int t, uint32_t seed) {
    CPU_PROF("adamw_update", 0, 0, cpu_adamw_update(params, master, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t, seed));
}

// ---- reductions
double sum_squares(const floatX* x, size_t n) {
    double r = 0.0;
    CPU_PROF("sum_squares", 0, 0, r = cpu_sum_squares(x, n));
    return r;
}
double sum_f32(const float* x, size_t n) { return cpu_sum_f32(x, n); }
void sum_squares_acc(double* acc, const floatX* x, size_t n) {
    CPU_PROF("sum_squares", 0, 0, cpu_sum_squares_acc(acc, x, n));
}
void sum_f32_acc(double* acc, const float* x, size_t n) { cpu_sum_f32_acc(acc, x, n); }
void seq_logp_sums(double* out, const float* losses, const int* ranges, int S) {
    CPU_PROF("seq_logp_sums", 0, 0, cpu_seq_logp_sums(out, losses, ranges, S));
}

// ---- NF4 frozen base weights
Nf4Op* nf4_op_upload(const NF4Tensor* t) { return cpu_nf4_op_upload(t); }
void nf4_op_free(Nf4Op* d) { cpu_nf4_op_free(d); }
size_t nf4_op_bytes(const Nf4Op* d) { return cpu_nf4_op_bytes(d); }
Nf4Op* nf4_op_view(const NF4Tensor* t) { return cpu_nf4_op_view(t); }
void nf4_op_bind(Nf4Op* d, const void* image) { cpu_nf4_op_bind(d, image); }
void nf4_dequantize_op(floatX* out, const Nf4Op* t, size_t row_begin, size_t rows) {
    CPU_PROF("nf4_dequantize_op", 0, 0, cpu_nf4_dequantize_op(out, t, row_begin, rows));
}
