// The op interface: every piece of tensor arithmetic the model and the trainer need, and the
// backend's lifetime, memory and capabilities. gpt2.c, linear.c, lora.c, ... call these neutral
// names only, so they are the same source for both backends.
//
// Backends: llmc/cpu/ (fp32 storage, OpenMP, GEMMs in fp32 (OpenBLAS) or bf16 (oneDNN)) and
// llmc/cuda/ (bf16 storage, fp32 accumulation, cuBLASLt and our own kernels) each implement every
// function below under their prefix (cpu_*, cuda_*: llmc/cpu/ops_cpu.h, llmc/cuda/ops_cuda.h), and
// one dispatch file per backend (llmc/cpu/dispatch.c, llmc/cuda/dispatch.cu) defines these names
// by calling its backend's; docs/ARCHITECTURE.md ("The op interface") says why. floatX, the
// element type of activations, parameters and gradients, is the one compile-time property of the
// backend that shared code sees (hence the #if below); the rest it asks at run time: ops_caps(),
// and llmc/ops/device.h for GPU selection and device collectives.
//
// Conventions (all backends):
// - Row-major. B = batch, T = time, C = channels, N = rows (B*T), OC = output channels.
// - Matmul weights are [OC, C] (llm.c orientation): out[n, o] = sum_c inp[n, c] * w[o, c] + b[o].
// - Backward ops ACCUMULATE (+=) into parameter gradients: those are zeroed once per optimizer
//   step, so micro-steps of gradient accumulation keep adding. An activation's gradient is written
//   by the op that makes its first contribution and added to by later ones: ops that produce one
//   take `accumulate` (0: dinp = ..., no need to zero it first; 1: dinp += ...). A NULL gradient
//   pointer means "not needed" (a frozen tensor: no weight gradient is computed at all).
// - Targets < 0 are ignored (loss mask / padding): they contribute no loss and no gradient.
#ifndef LLMC_OPS_H
#define LLMC_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/nf4.h"

#if defined(LLMC_CUDA) && defined(__cplusplus)
#include <cuda_bf16.h>
typedef __nv_bfloat16 floatX;
#elif defined(LLMC_CUDA)
// The shared C code (the layer folders of llmc/) of a CUDA build only moves floatX pointers and sizes buffers; it
// never does arithmetic on elements. An opaque 2-byte struct (same size and alignment as
// __nv_bfloat16, which is a struct of one unsigned short too) keeps the C code away from
// cuda_bf16.h (C++ only) and turns any accidental arithmetic into a compile error.
typedef struct { unsigned short bits; } floatX;
_Static_assert(sizeof(floatX) == 2, "floatX must have the size of __nv_bfloat16");
#else
typedef float floatX;
#endif

#ifdef __cplusplus
extern "C" {
#endif

// ----------------------------------------------------------------------------
// backend lifetime, capabilities and memory (backend.c / backend.cu)

void ops_init(int threads);           // threads <= 0: backend default (all cores on CPU)
const char* ops_backend_name(void);   // "cpu (OpenBLAS ...)" / "cuda (...)"

typedef enum { OPS_F32 = 0, OPS_BF16 = 1, OPS_F16 = 2 } OpsDtype;
typedef struct {
    OpsDtype floatx;        // what floatX holds (the format gradients travel in between ranks)
    size_t floatx_bytes;    // sizeof(floatX)
    int master_weights;     // 1: the optimizer keeps fp32 master weights of the floatX parameters
                            // and writes them back rounded (bf16 parameters)
    int doc_attention;      // 1: attention_forward / attention_backward keep packed records apart
                            // (doc_start); 0: they refuse doc_start (the trainer refuses packed data)
    size_t gemm_widen_bytes; // CPU: the fp32 panels bf16 GEMMs are widened into where the CPU has
                            // no bf16 matmul (llmc/cpu/gemm.h), once bf16 GEMMs are on; else 0
} OpsCaps;
OpsCaps ops_caps(void);
void* ops_alloc(size_t bytes);        // device memory on CUDA, aligned host memory on CPU
void ops_free(void* p);
void ops_zero(void* p, size_t bytes);
// Host memory for data that moves to and from the backend often (the optimizer offload): pinned
// (page-locked) on CUDA, so transfers run at full speed; aligned host memory on CPU.
void* ops_alloc_host(size_t bytes);
void ops_free_host(void* p);
// Host <-> backend copies (plain memcpy on the CPU backend).
void ops_to_device(void* dst, const void* src_host, size_t bytes);
void ops_to_host(void* dst_host, const void* src, size_t bytes);
// Backend -> backend copy, in order with the ops issued before and after it.
void ops_memcpy(void* dst, const void* src, size_t bytes);
// Host -> backend copy that does not wait for the device: src is taken at once (it may be reused
// as soon as this returns) and reaches the device in order with the ops issued after it. For the
// batches of a training step (the CUDA backend stages them in pinned memory).
void ops_to_device_async(void* dst, const void* src_host, size_t bytes);
// Transfers that overlap host work (the optimizer offload, llmc/model/optimizer.c): copies between
// pinned host memory (ops_alloc_host) and the backend on a copy stream of their own, issued at
// once and run in issue order, while the host goes on (it updates one piece while the next comes
// down and the previous goes up). CUDA: a non-blocking stream and events; CPU: a memcpy at once,
// every mark reached when it is made.
//   ops_copy_begin        the copies issued next wait for the backend work issued so far
//   ops_copy_to_host / ops_copy_to_device   enqueue one copy (host side: pinned memory)
//   ops_copy_mark         a mark after the copies issued so far; at most OPS_COPY_MARKS pending
//   ops_copy_wait         the host waits until the copies before the mark have run
//   ops_copy_end          the backend work issued next waits for every copy issued before
#define OPS_COPY_MARKS 16
void ops_copy_begin(void);
void ops_copy_to_host(void* dst_host, const void* src, size_t bytes);
void ops_copy_to_device(void* dst, const void* src_host, size_t bytes);
int ops_copy_mark(void);
void ops_copy_wait(int mark);
void ops_copy_end(void);
// Host fp32 <-> backend floatX conversion copies (n elements).
void ops_upload_f32(floatX* dst, const float* src_host, size_t n);
void ops_download_f32(float* dst_host, const floatX* src, size_t n);
void ops_synchronize(void);
// Deterministic kernels (the default): results identical run to run. Both backends are always
// deterministic (the CUDA attention backward sums its dS tiles with a dQ kernel in a fixed order:
// llmc/cuda/README.md, "Flash attention"), so 0 changes nothing.
void ops_set_deterministic(int on);
// The precision of the GEMMs (matmul_*): OPS_F32, or OPS_BF16 / OPS_F16 = operands rounded to
// bf16 / fp16 (round to nearest even; fp16 overflows to inf), products accumulated and written
// in fp32 (floatX). The CPU backend does all three (fp32: OpenBLAS; bf16: oneDNN; fp16: widened
// to fp32, an emulation of fp16 training's numerics) and starts in fp32; the CUDA backend
// computes in bf16 only and refuses the others. ops_bf16_native says whether bf16 GEMMs run natively here (the CPU: AVX512-BF16
// or AMX-BF16; a GPU: always), with a phrase saying why, for --dtype auto and its banner line.
void ops_set_gemm_dtype(OpsDtype d);
OpsDtype ops_gemm_dtype(void);
int ops_bf16_native(const char** why);
// The step split by op (--profile): ops_profile(1) clears the tally and starts timing every op
// call, 0 stops; ops_profile_print writes the tally per step over `steps` steps to stdout (op,
// shape for GEMMs, ms per step, calls, share). The CPU backend tallies (its ops are synchronous);
// the CUDA backend prints that it has no tally (profile it with Nsight Systems).
void ops_profile(int on);
void ops_profile_print(long steps);

// ----------------------------------------------------------------------------
// embeddings (encoder.c / encoder.cu)

// out[b,t,:] = wte[inp[b,t],:] + wpe[p,:] with p = t, or p = pos[b,t] when pos is given (packed
// records, whose positions start again at 0 with each record; backend memory, B*T, each < the
// rows of wpe).
void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, const int* pos,
                     int B, int T, int C);
// dwte[inp[b,t],:] += dout[b,t,:]; dwpe[p,:] += dout[b,t,:] with p as in the forward.
// Deterministic. dwte or dwpe may be NULL. inp_host / pos_host: the same tokens / positions in host
// memory (the caller has them; the CUDA backend groups the rows of each token and of each position
// on the host from them instead of reading the device's copy back). pos and pos_host are both NULL
// (p = t) or both given.
void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp, const int* inp_host,
                      const int* pos, const int* pos_host, int B, int T, int C);

// ----------------------------------------------------------------------------
// layernorm (layernorm.c / layernorm.cu)

// Layernorm over the last dim (eps 1e-5). mean/rstd (N floats each) are saved for backward.
void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* weight, const floatX* bias, int N, int C);
// dinp = the gradient of inp (+= with accumulate); dweight, dbias += theirs. Any may be NULL.
void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout,
                        const floatX* inp, const floatX* weight, const float* mean, const float* rstd,
                        int N, int C, int accumulate);
// Fused residual + layernorm: residual_out = a + b; ln_out = layernorm(residual_out).
void fused_residual_layernorm_forward(floatX* residual_out, floatX* ln_out, float* mean, float* rstd,
                                      const floatX* a, const floatX* b, const floatX* weight,
                                      const floatX* bias, int N, int C);

// ----------------------------------------------------------------------------
// matmul (matmul.c / matmul.cu, with gemm.cu: cuBLASLt)

// out[N, OC] = inp[N, C] @ weight[OC, C]^T (+ bias[OC]); bias may be NULL.
// With gelu_out != NULL the GELU epilogue also writes gelu_out = gelu(out) (out keeps the
// pre-activation, which backward needs).
void matmul_forward(floatX* out, floatX* gelu_out, const floatX* inp, const floatX* weight,
                    const floatX* bias, int N, int C, int OC);
// out[N, OC] += inp[N, C] @ weight[OC, C]^T: the GEMM adds to what out holds (cuBLASLt / BLAS
// beta = 1), so a LoRA branch joins the base output without a scratch and an add pass (and, in
// bf16, with one rounding instead of two).
void matmul_forward_acc(floatX* out, const floatX* inp, const floatX* weight, int N, int C, int OC);
// dinp = dout @ weight (+= with accumulate); dweight += dout^T @ inp; dbias += sum_n dout.
// Any may be NULL.
void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout,
                     const floatX* inp, const floatX* weight, int N, int C, int OC, int accumulate);
// The backward of a matmul whose input is inp = gelu(pre) (mlp.c_proj after the GELU), straight
// to the gradient of the pre-activation: dpre = (dout @ weight) * gelu'(pre), written (not
// accumulated); dweight and dbias as matmul_backward. One pass over dpre instead of writing
// d(inp) and reading it back (the CUDA backend: cuBLASLt's DGELU epilogue with pre as its aux).
void matmul_backward_gelu(floatX* dpre, floatX* dweight, floatX* dbias, const floatX* dout,
                          const floatX* inp, const floatX* pre, const floatX* weight, int N, int C, int OC);

// The same with the weight held in bf16 (raw bit patterns, uint16_t [OC, C]): a frozen weight
// kept at half the memory on a backend whose floatX is fp32 (LoRA's base on the CPU with --dtype
// bf16). Computed in bf16 GEMMs whatever ops_gemm_dtype says; there is no weight gradient.
void matmul_forward_w16(floatX* out, floatX* gelu_out, const floatX* inp, const uint16_t* weight,
                        const floatX* bias, int N, int C, int OC);
void matmul_backward_w16(floatX* dinp, floatX* dbias, const floatX* dout, const uint16_t* weight,
                         int N, int C, int OC, int accumulate);
// The same with the weight in llama.cpp's Q8_0 blocks (GGUF's GGML_TYPE_Q8_0): each run of 32
// values of a row is an fp16 scale d and 32 int8 q (34 bytes), value = d * q; a row of C values
// (C a multiple of 32) is C / 32 blocks. The products are of the exact values d * q (exact in
// fp32) and inp, summed in fp32, so the result is matmul_forward's on the dequantized weight up
// to the order of the sums. A frozen weight for sampling and scoring: there is no backward.
#define OPS_Q8_BLOCK 32
#define OPS_Q8_BLOCK_BYTES 34
void matmul_forward_q8(floatX* out, floatX* gelu_out, const floatX* inp, const uint8_t* weight,
                       const floatX* bias, int N, int C, int OC);

// ----------------------------------------------------------------------------
// element-wise (elementwise.c / elementwise.cu)

// GELU, tanh approximation (HF "gelu_new").
void gelu_forward(floatX* out, const floatX* inp, size_t n);
// dinp = gelu'(inp) * dout (+= with accumulate). dinp may alias dout (accumulate 0).
void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, int accumulate);

// out = a + b
void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n);
// dst += src
void add_inplace(floatX* dst, const floatX* src, size_t n);
// dst = src * scale (dst may alias src)
void scale_copy(floatX* dst, const floatX* src, float scale, size_t n);

// LoRA helpers (llmc/model/lora.c).
// Inverted dropout with a counter-based mask: element i is kept iff
// rand_uniform(seed, stream, i) >= p (llmc/base/rand.h), and kept elements are scaled by 1 / (1 - p):
// out[i] = keep(i) ? inp[i] / (1 - p) : 0. The mask is a pure function of (seed, stream, i), so
// backward regenerates it by calling this again on the gradient. out may alias inp.
void dropout_forward(floatX* out, const floatX* inp, size_t n, float p, uint64_t seed, uint64_t stream);
// dst[i] *= mask[i]
void mul_inplace(floatX* dst, const floatX* mask, size_t n);

// Rows chosen by a list of K distinct row numbers (backend memory), rows of row_bytes bytes (a
// multiple of 4: floatX rows of C channels, or one float a row): rows_gather: dst row k = src row
// idx[k]; rows_scatter: dst row idx[k] = src row k, other rows of dst untouched. The classifier
// runs on the rows that have a target only (llmc/model/gpt2.c, gpt2_head).
void rows_gather(void* dst, const void* src, const int* idx, int K, size_t row_bytes);
void rows_scatter(void* dst, const void* src, const int* idx, int K, size_t row_bytes);

// ----------------------------------------------------------------------------
// DoRA (dora.c / dora.cu): the weight-decomposed adapter of llmc/model/linear.h, whose layer
// computes y = (m / ||W + scaling B A||_row) * (W x + scaling B A x) + b

// norm[o] = || W[o, :] + scaling * (B A)[o, :] ||_2 for each of OC rows: the row norms of the
// adapted weight, W [OC, C], A [R, C], B [OC, R], summed in fp32 or wider (norm: OC floats,
// backend memory). PEFT detaches the norm from the graph, so it has no backward.
void dora_norm(float* norm, const floatX* W, const floatX* A, const floatX* B, float scaling, int OC, int C, int R);
// The same with W held in bf16 (raw bit patterns, as matmul_forward_w16 takes it).
void dora_norm_w16(float* norm, const uint16_t* W, const floatX* A, const floatX* B, float scaling, int OC, int C, int R);
// out[n, o] = (accumulate ? out[n, o] : 0) + (m[o] / norm[o] + shift) * in[n, o] (+ bias[o]), for N
// rows of OC channels: the magnitude's scale on a row of the layer (shift -1: the scale minus
// one, PEFT's form under dropout). bias may be NULL; out may alias in when accumulate is 0.
void dora_scale(floatX* out, const floatX* in, const floatX* m, const float* norm, float shift,
                const floatX* bias, int N, int OC, int accumulate);
// dm[o] += sum_n dout[n, o] * z[n, o] / norm[o]: the magnitude's gradient, z the layer's output
// before the scale (W x + scaling B A x). Deterministic: each o sums its rows in a fixed order.
void dora_magnitude_backward(floatX* dm, const floatX* dout, const floatX* z, const float* norm, int N, int OC);

// ----------------------------------------------------------------------------
// attention (attention.c / attention.cu, with attention_simple.cu), and over a key/value cache
// (attention_kv.c / attention_kv.cu)

// Causal multi-head self attention, flash-style: the (T, T) matrix is never materialised.
// qkv: (B, T, 3, NH, HS) i.e. (B, T, 3C) as produced by the fused c_attn matmul.
// out: (B, T, C) with heads concatenated. lse: (B, NH, T) log-sum-exp of each row's scaled
// scores (natural log), saved for backward.
// doc_start: NULL (each row of T positions is one sequence), or packed records (int32 (B, T) in
// backend memory): for each position, the position in its row where its record starts; query t
// sees the keys doc_start[t] <= k <= t only. Records are contiguous runs: doc_start[0] = 0 and
// doc_start[t] is doc_start[t-1] or t. Only where ops_caps().doc_attention says so.
void attention_forward(floatX* out, float* lse, const floatX* qkv, const int* doc_start, int B, int T, int C, int NH);
// dqkv = gradient w.r.t. qkv (+= with accumulate). Recomputes probabilities from lse. doc_start as
// in the forward.
void attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, const int* doc_start, int B, int T, int C, int NH, int accumulate);
// The backend memory attention keeps between calls for batches up to B x T (a buffer grown to
// the largest shape and reused, not counted in any argument): the forward's, plus the backward's
// with backward = 1; what the model adds to its activations in the memory report and the
// trainers' device memory check. The CPU backend: the forward's K^T copy of every head (B T C
// floats, T rounded up to a key tile; its backward's per-thread tiles are taken per call and are
// small); CUDA: the backward's row terms and dS tiles (llmc/cuda/README.md, "Flash attention").
// attention_reserve takes that memory now (the model does when it allocates its activations),
// so that the first step allocates nothing; a shape that needs more later still grows it.
size_t attention_scratch_bytes(int B, int T, int C, int NH, int backward);
void attention_reserve(int B, int T, int C, int NH, int backward);

// Attention of Tn new tokens at positions [pos, pos + Tn) over a key/value cache (sampling).
// qkv_new: (B, Tn, 3C) as produced by c_attn for the new tokens. First writes their K and V into
// the caches, laid out (B, NH, maxT, HS) (rows [pos, pos + Tn) of each head), then each new query
// at position pos + t attends over cache rows [0, pos + t] (causal within the new tokens).
// out: (B, Tn, C), heads concatenated. Requires pos + Tn <= maxT.
void attention_forward_kv(floatX* out, const floatX* qkv_new, floatX* kcache, floatX* vcache,
                          int B, int pos, int Tn, int maxT, int C, int NH);
// The same with the caches in bf16 (raw bit patterns; the new keys and values rounded to nearest
// even as they are written): half the cache's memory and of the bytes a token reads where floatX
// is fp32 (the CPU backend's --dtype bf16); where floatX is bf16, attention_forward_kv itself.
void attention_forward_kv16(floatX* out, const floatX* qkv_new, uint16_t* kcache, uint16_t* vcache,
                            int B, int pos, int Tn, int maxT, int C, int NH);

// ----------------------------------------------------------------------------
// classifier (classifier.c / classifier.cu)

// Fused classifier: for each of N rows of logits (row stride Vp, first V columns real),
// losses[n] = -log softmax(logits[n])[targets[n]] (0 when targets[n] < 0).
// If dloss != 0, logits are overwritten in place with the gradient
// dloss * (softmax - onehot(target)) (zero for ignored rows and for padded columns).
void fused_classifier(float* losses, floatX* logits, const int* targets, float dloss,
                      int N, int V, int Vp);

// The classifier of a training forward, whole: logits = x[N, C] @ w[Vp, C]^T (lm_head, the tied
// wte), losses as fused_classifier's, and with dloss != 0 its backward as well:
// dx[N, C] += dlogits @ w, dw[Vp, C] += dlogits^T @ x (dw may be NULL: frozen wte). logits is
// scratch of classifier_rows(N) rows x Vp: the CPU backend goes through the rows in blocks of
// that many (512), so the whole [N, Vp] logits never exist (206 MB at N = 1024, 824 MB at 4096);
// CUDA's kernels use all N rows at once. w16: w held in bf16 by its owner (a frozen lm_head on an
// fp32 backend: llmc/model/model.c), or NULL. The GEMMs that read the weight (logits, dx) take it
// from w16, in bf16, as matmul_forward_w16 does, instead of rounding w's Vp x C elements at every
// call; dw's GEMM reads no weight. A bf16 backend reads w16 as its floatX.
int classifier_rows(int N);
void classifier_train(float* losses, floatX* dx, floatX* dw, floatX* logits, const floatX* x, const floatX* w,
                      const uint16_t* w16, const int* targets, float dloss, int N, int C, int V, int Vp);
// The same with a weight per row instead of dloss (the preference objectives, whose loss is a
// function of whole sequences' log-probabilities: llmc/model/prefmodel.h): row n's logits get the
// gradient dloss_rows[n] * (softmax - onehot(target)) (none for targets < 0); dloss_rows: N floats
// in backend memory. Always a training call: dx and dw as classifier_train's with dloss != 0.
void classifier_train_rows(float* losses, floatX* dx, floatX* dw, floatX* logits, const floatX* x, const floatX* w,
                           const uint16_t* w16, const int* targets, const float* dloss_rows, int N, int C, int V, int Vp);

// ----------------------------------------------------------------------------
// optimizer (adamw.c / adamw.cu) and reductions (reduce.c / reduce.cu)

// AdamW on n contiguous elements (PyTorch semantics, decoupled weight decay):
//   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
// master (fp32 copy of params) may be NULL when params are fp32 (CPU); when given, the update
// is done on master and written to params (rounded stochastically with `seed` on bf16).
void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int t, uint32_t seed);
// Sum of squares of n elements, in double.
double sum_squares(const floatX* x, size_t n);
// Sum of n fp32 values (the per-token losses), in double.
double sum_f32(const float* x, size_t n);
// The same sums added into *acc, one double in backend memory, without reading anything back
// (the training step accumulates its loss and gradient norm on the device and reads them once).
// Deterministic; the result equals what sum_squares / sum_f32 return, added in order.
void sum_squares_acc(double* acc, const floatX* x, size_t n);
void sum_f32_acc(double* acc, const float* x, size_t n);
// The per-sequence log-probabilities of the preference objectives (llmc/model/prefmodel.h): out[s]
// = -(the sum of losses[i] over i in [ranges[2s], ranges[2s + 1])), where losses are the per-token
// losses of a forward with targets (-log p of each target). Each sum in double, its terms in order
// (deterministic); out (S doubles) and ranges (2S ints) in backend memory.
void seq_logp_sums(double* out, const float* losses, const int* ranges, int S);

// ----------------------------------------------------------------------------
// NF4 frozen base weights (QLoRA, llmc/model/qlora.c; nf4_ops.c / nf4_ops.cu, with nf4.cu)

// One NF4-quantized tensor (llmc/ops/nf4.h layout) placed in backend memory. nf4_op_upload copies
// every array of t to the device (CUDA) or borrows t (CPU: t must outlive the handle).
typedef struct Nf4Op Nf4Op;
Nf4Op* nf4_op_upload(const NF4Tensor* t);
void nf4_op_free(Nf4Op* d);
// Backend bytes the handle holds (0 on the CPU backend, where the host tensor is the storage).
size_t nf4_op_bytes(const Nf4Op* d);
// out[rows, cols] = dequant(rows [row_begin, row_begin + rows) of the tensor viewed as
// [shape[0], cols = n / shape[0]]): the fp32 values bitsandbytes' dequantize_4bit gives, stored as
// floatX (rounded to nearest even on bf16). For dequantizing a frozen weight into a scratch
// buffer right before its matmul.
void nf4_dequantize_op(floatX* out, const Nf4Op* t, size_t row_begin, size_t rows);
// ZeRO 3 (llmc/dist/fsdp.h): a handle over t's packed image (llmc/ops/nf4.h, nf4_image_layout) held in
// backend memory by its caller, which moves between gather buffers: nf4_op_bind points the handle
// at where the image is now, before the handle's next use. t gives the description only (its
// arrays may be gone) and must outlive the handle; the handle owns no data (nf4_op_bytes 0).
Nf4Op* nf4_op_view(const NF4Tensor* t);
void nf4_op_bind(Nf4Op* d, const void* image);

#ifdef __cplusplus
}
#endif
#endif // LLMC_OPS_H
