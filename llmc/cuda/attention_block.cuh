// Flash attention (attention.cu): the order in which a launch's blocks start. Grids are (tiles,
// heads); fa_block gives a block, by its place in the order the GPU starts blocks (linear id, x
// fastest), its tile's rank (0: the longest, the most key or query tiles to visit) and its head.
// Heads go in balanced groups of at most FA_HEAD_GROUP and, within a group, rank-major: every
// head's longest tile, then every head's next one. Causal tiles differ in length; longest first
// keeps the last wave from being a few long blocks, and a group's K and V (forward, dQ) or Q and
// dO (dK/dV) stay in L2 while its blocks run. Any order gives the same results: every output
// element has one writer. dev/attention_schedule.py models the order; llmc/cuda/README.md has
// its figures.
#ifndef LLMC_CUDA_ATTENTION_BLOCK_CUH
#define LLMC_CUDA_ATTENTION_BLOCK_CUH

#include "cuda/common.cuh"

// The block's tile rank and head (0 .. gridDim.y - 1) from its linear id, rank-major within
// balanced groups of at most FA_HEAD_GROUP heads.
#define FA_HEAD_GROUP 64
struct FaBlock {
    int rank, head;
};
__device__ __forceinline__ FaBlock fa_block() {
    const unsigned nt = gridDim.x, nh = gridDim.y, L = blockIdx.x + nt * blockIdx.y;
    const unsigned ng = (nh + FA_HEAD_GROUP - 1) / FA_HEAD_GROUP, gh = (nh + ng - 1) / ng;   // groups, heads a group
    const unsigned g0 = L / (nt * gh) * gh, gs = min(gh, nh - g0), r = L - g0 * nt;           // first head, heads, rank
    FaBlock f;
    f.rank = (int)(r / gs);
    f.head = (int)(g0 + r % gs);
    return f;
}

#endif // LLMC_CUDA_ATTENTION_BLOCK_CUH
