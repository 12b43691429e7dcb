// Model FLOPs utilization: the FLOPs one training token costs, and the peak bf16 tensor-core
// FLOP/s of the GPU it runs on, so that the step line can say how much of the device a run uses.
//
// FLOPs per token (the usual "model FLOPs": activation recompute is not counted):
//   2 per parameter for the forward pass (one multiply-add per weight), 4 more for backward
//   (input gradient and weight gradient), so 6 N when every parameter trains; a frozen base
//   (LoRA, QLoRA) skips its weight gradients: 4 N_base + 6 N_adapter. Attention's two matmuls
//   (Q K^T and P V) cost 2 * 2 * T * C per token and layer forward over the T keys, halved for the
//   causal mask, times 3 with backward: 6 L C T. (llm.c counts the same way; PaLM's appendix
//   counts the non-causal 12 L C T.) N includes the embeddings: wte is also the lm_head matmul.
// The dequantization of an NF4 base and the elementwise ops are overhead, not model FLOPs.
#ifndef LLMC_MFU_H
#define LLMC_MFU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// FLOPs of one training token (forward + backward) of a GPT-2 with L layers of width C at
// sequence length T: n_base parameters (frozen when base_frozen) plus n_adapter trained ones.
double mfu_flops_per_token(size_t n_base, int base_frozen, size_t n_adapter, int L, int C, int T);

// Peak dense bf16 tensor-core FLOP/s (fp32 accumulation, no sparsity) of the GPU named in
// `device` (a cudaDeviceProp name such as "NVIDIA H100 80GB HBM3", or any text containing it, e.g.
// the CUDA backend's name). 0 when the device is not in the table (CPUs, the emulated backend,
// GPUs we have no figure for). *model (optional) gets the table's name for it.
double mfu_peak_bf16_flops(const char* device, const char** model);

#ifdef __cplusplus
}
#endif
#endif // LLMC_MFU_H
