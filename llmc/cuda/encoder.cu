// Token + position embedding forward and a deterministic backward (no float atomics): the wte
// gradient is computed per vocabulary row from a host-side bucketing of the token positions,
// and each row's positions are summed in a fixed order. Positions are t, or given per row (packed
// records restart at 0 with each record); then the wpe gradient is bucketed the same way.
#include <stdlib.h>
#include <algorithm>
#include <vector>
#include "cuda/common.cuh"
#include "cuda/ops_cuda.h"

// one thread per 8 channels of one (b, t); position pos[bt], or t without pos
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                       const int* pos, int BT, int T, int C, int vec) {
    int chunks = (C + 7) / 8;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * chunks) return;
    int bt = (int)(idx / chunks), c = (int)(idx % chunks) * 8, t = pos ? pos[bt] : bt % T;
    float a[8], b[8];
    load8f(a, wte + (size_t)inp[bt] * C, c, C, vec);
    load8f(b, wpe + (size_t)t * C, c, C, vec);
    for (int k = 0; k < 8; k++) a[k] += b[k];
    store8f(out + (size_t)bt * C, a, c, C, vec);
}

// dwpe[t, c..c+8) += sum_b dout[b, t, c..c+8), b in order
__global__ void encoder_backward_wpe_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C, int vec) {
    int chunks = (C + 7) / 8;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * chunks) return;
    int t = (int)(idx / chunks), c = (int)(idx % chunks) * 8;
    float acc[8], d[8];
    load8f(acc, dwpe + (size_t)t * C, c, C, vec);
    for (int b = 0; b < B; b++) {
        load8f(d, dout + ((size_t)b * T + t) * C, c, C, vec);
        for (int k = 0; k < 8; k++) acc[k] += d[k];
    }
    store8f(dwpe + (size_t)t * C, acc, c, C, vec);
}

// Block = one distinct key (bucket: a token for dwte, a position for packed dwpe); threads stride
// over 8-channel chunks. pos[start[u] .. start[u+1]) are the (b*T + t) rows holding key key[u],
// ascending: d[key[u], :] += their dout rows, in that order.
__global__ void encoder_backward_rows_kernel(floatX* d, const floatX* dout, const int* key, const int* start,
                                             const int* pos, int C, int vec) {
    int u = blockIdx.x;
    int p0 = start[u], p1 = start[u + 1];
    floatX* row = d + (size_t)key[u] * C;
    for (int c = threadIdx.x * 8; c < C; c += blockDim.x * 8) {
        float acc[8], d[8];
        load8f(acc, row, c, C, vec);
        for (int p = p0; p < p1; p++) {
            load8f(d, dout + (size_t)pos[p] * C, c, C, vec);
            for (int k = 0; k < 8; k++) acc[k] += d[k];
        }
        store8f(row, acc, c, C, vec);
    }
}

extern "C" void cuda_encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, const int* pos,
                                     int B, int T, int C) {
    int BT = B * T, vec = C % 8 == 0 && ops_aligned16(out) && ops_aligned16(wte) && ops_aligned16(wpe);
    size_t work = (size_t)BT * ((C + 7) / 8);
    if (!work) return;
    LAUNCH(encoder_forward_kernel, ops_blocks(work, 256), 256, 0, 0, out, inp, wte, wpe, pos, BT, T, C, vec);
    cudaCheck(cudaGetLastError());
}

// The buckets of a gradient by key (the tokens, or the positions of packed records), grouped on
// the host from the caller's copy of the keys (the device is not waited for: the backward kernels
// before this one keep running). Layout: key[nb] | start[nb + 1] | pos[BT]; returns nb.
// A stable sort by key: buckets in key order, each bucket's rows ascending.
static int encoder_buckets(int* out, const int* keys, int BT) {
    static std::vector<int> order;   // host scratch, kept between calls
    order.resize(BT);
    for (int i = 0; i < BT; i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return keys[x] < keys[y]; });
    int nb = 0;
    for (int i = 0; i < BT; i++)
        if (i == 0 || keys[order[i]] != keys[order[i - 1]]) nb++;
    int *key = out, *start = out + nb, *pos = out + 2 * nb + 1, u = 0;
    for (int i = 0; i < BT; i++) {
        if (i == 0 || keys[order[i]] != keys[order[i - 1]]) { key[u] = keys[order[i]]; start[u] = i; u++; }
        pos[i] = order[i];
    }
    start[nb] = BT;
    return nb;
}

// d[keys[n], :] += dout[n, :] over the BT rows: the buckets uploaded asynchronously from pinned
// memory into slot `half` of the encoder's scratch (one per gradient: the wte and wpe buckets of
// one call are in flight together), then one block per bucket.
static void encoder_backward_rows(floatX* d, const floatX* dout, const int* keys_host, int BT, int C, int half) {
    // sized for the most buckets (every key distinct), so the device buffer never changes size
    const size_t cap = (3 * (size_t)BT + 1) * sizeof(int);
    int* hbuf = (int*)ops_stage_host(cap);
    int nb = encoder_buckets(hbuf, keys_host, BT);
    int* dbuf = (int*)ops_scratch(OPS_SCRATCH_ENCODER, 2 * cap) + (size_t)half * (cap / sizeof(int));
    cudaCheck(cudaMemcpyAsync(dbuf, hbuf, (2 * (size_t)nb + 1 + BT) * sizeof(int), cudaMemcpyHostToDevice, 0));
    int vec = C % 8 == 0 && ops_aligned16(d) && ops_aligned16(dout);
    int threads = std::min(256, std::max(32, ((C + 7) / 8 + 31) / 32 * 32));
    LAUNCH(encoder_backward_rows_kernel, nb, threads, 0, 0, d, dout, dbuf, dbuf + nb, dbuf + 2 * nb + 1, C, vec);
    cudaCheck(cudaGetLastError());
}

extern "C" void cuda_encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp_host, const int* pos_host,
                                      int B, int T, int C) {
    int BT = B * T;
    if (BT == 0 || C == 0) return;
    if (dwpe && pos_host) encoder_backward_rows(dwpe, dout, pos_host, BT, C, 1);
    else if (dwpe) {
        int vec = C % 8 == 0 && ops_aligned16(dwpe) && ops_aligned16(dout);
        size_t work = (size_t)T * ((C + 7) / 8);
        LAUNCH(encoder_backward_wpe_kernel, ops_blocks(work, 256), 256, 0, 0, dwpe, dout, B, T, C, vec);
        cudaCheck(cudaGetLastError());
    }
    if (dwte) encoder_backward_rows(dwte, dout, inp_host, BT, C, 0);
}
