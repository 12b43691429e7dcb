// Flash attention (attention.cu): which keys a query sees, and which key tiles a block and a warp
// visit. Query q sees key k when k <= q (causal) and k is at or after the start of q's record
// (packed sequences: doc_start, (B, T) int32; 0 without it). Record starts never decrease along a
// sequence, so the first row of a run of queries has its earliest start and the last row its
// latest: a block visits the key tiles from the one holding its first row's start to the
// diagonal, and masks element by element only the tiles that cross the diagonal or a record
// start (the kernels' MASK template flag); the others run unmasked.
#ifndef LLMC_CUDA_ATTENTION_MASK_CUH
#define LLMC_CUDA_ATTENTION_MASK_CUH

#include "cuda/attention_traits.cuh"

// The masking rule of every kernel: query q sees key k when k <= q (causal) and k is at or after
// the start of q's record (packed sequences: doc_start; 0 without). Rows at or past T see nothing
// (only the backward reads them: they lie in its query tiles).
__device__ __forceinline__ int fa_record_start(const int* ds, int q, int T) { return ds && q < T ? ds[q] : 0; }
__device__ __forceinline__ bool fa_sees(int q, int k, int start) { return k <= q && k >= start; }

#endif // LLMC_CUDA_ATTENTION_MASK_CUH
