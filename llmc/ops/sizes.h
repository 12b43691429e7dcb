// The backends' own scratch memory as a function of shapes alone: one definition used by the
// backend that allocates it (llmc/cpu/, llmc/cuda/) and by the memory plan (llmc/plan/memplan.h),
// which plans for either backend from either build (docs/MEMORY.md's GPU columns come from the
// CPU build).
#ifndef LLMC_OPS_SIZES_H
#define LLMC_OPS_SIZES_H

#include <stddef.h>

// CPU (llmc/cpu/classifier.c): classifier_train goes through the rows in blocks of this many, so
// its logits scratch is min(N, 512) x Vp.
#define OPS_CPU_CLS_ROWS 512
// CPU (llmc/cpu/attention.c): keys per tile; attention keeps one scratch between calls, K
// transposed, (B, NH, HS, T rounded up to a tile) fp32.
#define OPS_CPU_ATTN_BK 64
static inline size_t ops_cpu_attention_scratch_bytes(int B, int T, int C) {
    if (B <= 0 || T <= 0) return 0;
    const size_t Tp = ((size_t)T + OPS_CPU_ATTN_BK - 1) / OPS_CPU_ATTN_BK * OPS_CPU_ATTN_BK;
    return (size_t)B * (size_t)C * Tp * sizeof(float);
}

// CUDA (llmc/cuda/backend.cu): fp32 <-> bf16 copies (ops_upload_f32, ops_download_f32) go through
// a device buffer of at most this many fp32 elements, grown to the largest copy's chunk.
#define OPS_CUDA_CAST_CHUNK ((size_t)1 << 24)

// CUDA (llmc/cuda/attention.cu): flash attention takes head sizes that are multiples of 16 up to
// 128 (tensor cores); the CUDA-core fallback (attention_simple.cu) any head size up to 128.
#define OPS_CUDA_ATTN_MAX_HS 128
#define OPS_CUDA_FA_BN 64                            // keys of a tile, queries of a backward step
#define OPS_CUDA_FA_DS_MAX_BYTES ((size_t)256 << 20) // the backward's dS^T tiles, at most
#define OPS_CUDA_FA_MAX_GRID_Y 65535                 // heads of one backward launch (grid y), at most
static inline int ops_cuda_flash_supported(int HS) { return HS % 16 == 0 && HS >= 16 && HS <= OPS_CUDA_ATTN_MAX_HS; }
// The backward keeps one head's dS^T tiles, nt (nt + 1) / 2 tiles of 64 x 64 bf16 (nt: 64-row
// tiles of T), for as many heads at once as fit in ds_max (one at least) and one launch takes.
static inline size_t ops_cuda_fa_ds_head_bytes(int T) {
    const size_t nt = ((size_t)T + OPS_CUDA_FA_BN - 1) / OPS_CUDA_FA_BN;
    return nt * (nt + 1) / 2 * OPS_CUDA_FA_BN * OPS_CUDA_FA_BN * 2;
}
static inline int ops_cuda_fa_ds_chunk_heads(int BNH, int T, size_t ds_max) {
    size_t fit = ds_max / ops_cuda_fa_ds_head_bytes(T);
    fit = fit < OPS_CUDA_FA_MAX_GRID_Y ? fit : OPS_CUDA_FA_MAX_GRID_Y;
    return (int)(fit < 1 ? 1 : fit < (size_t)BNH ? fit : (size_t)BNH);
}
// The backward's scratch (the forward keeps none): the row terms D and L2 (fp32, B NH T rounded
// up to a tile, each), then the dS^T tiles; the fallback keeps D only.
static inline size_t ops_cuda_attention_backward_bytes(int B, int T, int C, int NH, size_t ds_max) {
    if (B <= 0 || T <= 0 || NH <= 0 || C % NH != 0) return 0;
    const size_t rows = (size_t)B * NH * T;
    if (!ops_cuda_flash_supported(C / NH)) return rows * sizeof(float);
    const size_t Tp = ((size_t)T + OPS_CUDA_FA_BN - 1) / OPS_CUDA_FA_BN * OPS_CUDA_FA_BN;
    const size_t pre = (size_t)2 * B * NH * Tp * sizeof(float);
    return pre + (size_t)ops_cuda_fa_ds_chunk_heads(B * NH, T, ds_max) * ops_cuda_fa_ds_head_bytes(T);
}

#endif // LLMC_OPS_SIZES_H
