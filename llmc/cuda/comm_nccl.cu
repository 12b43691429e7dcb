// NCCL implementation of the comm_dev_* calls of llmc/comm.h (CUDA builds). Thin on purpose:
// each call is one NCCL collective on the caller's stream. The communicator is bootstrapped over
// the host implementation (MPI): rank 0 makes the unique id, comm_broadcast sends it to everyone,
// every rank joins with ncclCommInitRank on its current CUDA device.
//
// Usage (trainer, CUDA build):
//   comm_init(&comm, &argc, &argv);
//   cudaSetDevice(comm.local_rank);     // one GPU per rank
//   comm_nccl_attach(&comm);            // from here on comm_dev_* take device buffers
//   ... comm_dev_reduce_scatter_sum(&comm, grads, grads + rank*shard, shard, COMM_F32, stream) ...
//   comm_nccl_detach(&comm);
//   comm_finalize(&comm);
// With one rank no NCCL communicator is created; the calls become device-to-device copies.
//
// Determinism: NCCL reduces in a fixed order for a given rank count, topology, NCCL version,
// message size and algorithm/protocol choice, so runs repeat bit for bit on the same machine; pin
// NCCL_ALGO / NCCL_PROTO in the environment to make it independent of NCCL's tuning. bf16 buffers
// are summed by NCCL in bf16 steps (rounded at every hop); reduce gradients in fp32 where accuracy
// matters more than bandwidth.
//
// Compile check without a GPU: make cuda-check (nvcc, warnings as errors, every GPU architecture).
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include "../comm_internal.h"
#include "../check.h"

typedef struct {
    ncclComm_t comm; // NULL with one rank
    int device;
} NcclState;

static void nccl_failed(ncclResult_t r, ncclComm_t comm, const char* call, const char* file, int line) {
    const char* last = comm ? ncclGetLastError(comm) : "";
    llmc_fatal_at(file, line, "set NCCL_DEBUG=WARN for NCCL's own diagnostics; if another rank failed first, its message is above",
                  "NCCL call failed: %s: %s%s%s", call, ncclGetErrorString(r), last && last[0] ? ": " : "", last ? last : "");
}
#define ncclCheckComm(comm, call) do { ncclResult_t r_ = (call); \
    if (r_ != ncclSuccess) nccl_failed(r_, comm, #call, __FILE__, __LINE__); } while (0)

static void cuda_failed(cudaError_t e, const char* call, const char* file, int line) {
    llmc_fatal_at(file, line, "check the GPU and driver (nvidia-smi)", "CUDA call failed: %s: %s", call, cudaGetErrorString(e));
}
#define cudaCheckComm(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) cuda_failed(e_, #call, __FILE__, __LINE__); } while (0)

static NcclState* ns(const Comm* c) { return (NcclState*)c->nccl; }

static ncclDataType_t nccl_type(CommDtype dt) {
    switch (dt) {
        case COMM_F32: return ncclFloat32;
        case COMM_BF16: return ncclBfloat16;
    }
    fatal(NULL, "unknown CommDtype %d", (int)dt);
}
static size_t dt_bytes(CommDtype dt) { return dt == COMM_BF16 ? 2 : 4; }

static void copy_d2d(void* dst, const void* src, size_t bytes, void* stream) {
    if (dst != src && bytes) cudaCheckComm(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
}

static void nccl_allreduce_sum(Comm* c, void* buf, size_t n, CommDtype dt, void* stream) {
    ncclComm_t nc = ns(c)->comm;
    if (!nc) return;
    ncclCheckComm(nc, ncclAllReduce(buf, buf, n, nccl_type(dt), ncclSum, nc, (cudaStream_t)stream));
}

static void nccl_reduce_scatter_sum(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream) {
    ncclComm_t nc = ns(c)->comm;
    if (!nc) { copy_d2d(recv, send, shard * dt_bytes(dt), stream); return; }
    ncclCheckComm(nc, ncclReduceScatter(send, recv, shard, nccl_type(dt), ncclSum, nc, (cudaStream_t)stream));
}

static void nccl_allgather(Comm* c, const void* send_shard, void* recv_full, size_t shard, CommDtype dt, void* stream) {
    ncclComm_t nc = ns(c)->comm;
    if (!nc) { copy_d2d(recv_full, send_shard, shard * dt_bytes(dt), stream); return; }
    ncclCheckComm(nc, ncclAllGather(send_shard, recv_full, shard, nccl_type(dt), nc, (cudaStream_t)stream));
}

static void nccl_reduce_sum(Comm* c, const void* send, void* recv, size_t n, CommDtype dt, int root, void* stream) {
    if (root < 0 || root >= c->world) fatal(NULL, "comm_dev_reduce_sum: root %d is not a rank of this %d-rank run", root, c->world);
    ncclComm_t nc = ns(c)->comm;
    if (!nc) { copy_d2d(recv, send, n * dt_bytes(dt), stream); return; }
    // recv is ignored by NCCL on non-root ranks; comm.h allows NULL there
    void* out = recv ? recv : const_cast<void*>(send);
    ncclCheckComm(nc, ncclReduce(send, out, n, nccl_type(dt), ncclSum, root, nc, (cudaStream_t)stream));
}

static void nccl_broadcast(Comm* c, void* buf, size_t bytes, int root, void* stream) {
    if (root < 0 || root >= c->world) fatal(NULL, "comm_dev_broadcast: root %d is not a rank of this %d-rank run", root, c->world);
    ncclComm_t nc = ns(c)->comm;
    if (!nc) return;
    ncclCheckComm(nc, ncclBroadcast(buf, buf, bytes, ncclUint8, root, nc, (cudaStream_t)stream));
}

static void nccl_group_begin(Comm* c) { if (ns(c)->comm) ncclCheckComm(ns(c)->comm, ncclGroupStart()); }
static void nccl_group_end(Comm* c) { if (ns(c)->comm) ncclCheckComm(ns(c)->comm, ncclGroupEnd()); }

static const CommDevOps NCCL_OPS = {
    "mpi+nccl",
    nccl_allreduce_sum,
    nccl_reduce_scatter_sum,
    nccl_allgather,
    nccl_reduce_sum,
    nccl_broadcast,
    nccl_group_begin,
    nccl_group_end,
};
static const CommDevOps CUDA_SINGLE_OPS = {
    "single+cuda",
    nccl_allreduce_sum,
    nccl_reduce_scatter_sum,
    nccl_allgather,
    nccl_reduce_sum,
    nccl_broadcast,
    nccl_group_begin,
    nccl_group_end,
};

extern "C" void comm_nccl_attach(Comm* c) {
    if (c->dev_ops) fatal(NULL, "comm_nccl_attach called twice");
    NcclState* s = (NcclState*)callocCheck(1, sizeof(NcclState));
    cudaCheckComm(cudaGetDevice(&s->device));
    if (c->world > 1) {
        ncclUniqueId id;
        memset(&id, 0, sizeof(id));
        if (c->rank == 0) ncclCheckComm(nullptr, ncclGetUniqueId(&id));
        comm_broadcast(c, &id, sizeof(id), 0);
        ncclCheckComm(nullptr, ncclCommInitRank(&s->comm, c->world, id, c->rank));
    }
    c->nccl = s;
    c->dev_ops = c->world > 1 ? &NCCL_OPS : &CUDA_SINGLE_OPS;
    c->dev_impl = COMM_DEV_NCCL;
}

extern "C" void comm_nccl_detach(Comm* c) {
    NcclState* s = ns(c);
    if (!s) return;
    if (s->comm) {
        // flush outstanding operations on every rank before freeing
        ncclCheckComm(s->comm, ncclCommFinalize(s->comm));
        ncclCheckComm(s->comm, ncclCommDestroy(s->comm));
    }
    free(s);
    c->nccl = NULL;
    c->dev_ops = NULL;
    c->dev_impl = COMM_DEV_HOST;
}
