// Flash attention (attention.cu): which keys a query sees, and which key tiles a block and a warp
// visit. Query q sees key k when k <= q (causal) and k is at or after the start of q's record
// (packed sequences: doc_start, (B, T) int32; 0 without it). Record starts never decrease along a
// sequence, so the first row of a run of queries has its earliest start and the last row its
// latest: a block visits the key tiles from the one holding its first row's start to the
// diagonal, and masks element by element only the tiles that cross the diagonal or a record
// start (the kernels' MASK template flag); the others run unmasked. Three of the tile tests are
// written out in the kernels (the comments below say which): as calls, nvcc schedules the
// kernels differently. llmc/cuda/README.md ("Flash attention", packed sequences) has the long form.
#ifndef LLMC_CUDA_ATTENTION_MASK_CUH
#define LLMC_CUDA_ATTENTION_MASK_CUH

#include "cuda/attention_traits.cuh"

// The record starts of sequence b (row b of doc_start), or NULL without doc_start.
__device__ __forceinline__ const int* fa_seq_starts(const int* doc_start, int b, int T) {
    return doc_start ? doc_start + (size_t)b * T : NULL;
}

// The masking rule of every kernel: query q sees key k when k <= q (causal) and k is at or after
// the start of q's record (ds: the sequence's starts, or NULL: 0). Rows at or past T see nothing
// (only the backward reads them: they lie in its query tiles).
__device__ __forceinline__ int fa_record_start(const int* ds, int q, int T) { return ds && q < T ? ds[q] : 0; }
__device__ __forceinline__ bool fa_sees(int q, int k, int start) { return k <= q && k >= start; }

// The key tiles that queries from q0 visit (forward; dQ writes the first one out): from the one
// holding q0's record start, the earliest of the run, to the diagonal's, that of the last query
// below q1 and T.
__device__ __forceinline__ int fa_first_key_tile(const int* ds, int q0) { return ds ? ds[q0] / FA_BN : 0; }
__device__ __forceinline__ int fa_last_key_tile(int q1, int T) { return (min(q1, T) - 1) / FA_BN; }

// Forward, per warp (warp-uniform): rows row0 .. row_last, whose record starts run from start to
// start_last, skip key tile k0 when they are padding rows only, or the tile lies above the
// diagonal or wholly before their records. (The kernel masks a tile that crosses the diagonal, a
// key above row0, or a record start, a key before start_last: k0 + FA_BN - 1 > row0 ||
// k0 < start_last, written out there.)
__device__ __forceinline__ bool fa_rows_skip_tile(int row0, int row_last, int start, int k0, int T) {
    return row0 >= T || k0 > row_last || k0 + FA_BN <= start;
}

// dK/dV, per warp and sub-step: queries q .. qe - 1 against keys k .. k_last need the element mask
// when a key lies above q (the diagonal), some queries are past T, or the last query's record
// starts after k. (Per block, the kernel's pass over query tiles ends at the first tile whose
// first row's record starts after its keys: no later tile sees them either.)
__device__ __forceinline__ bool fa_queries_mask_keys(const int* ds, int q, int qe, int k, int k_last, int T) {
    return q < k_last || qe > T || (ds && ds[min(qe, T) - 1] > k);
}

#endif // LLMC_CUDA_ATTENTION_MASK_CUH
