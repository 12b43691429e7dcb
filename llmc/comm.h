// Collective communication between the ranks of one training run (DESIGN.md section 6).
//
// One interface, three implementations:
//   - single process: world = 1, every collective is a copy or a no-op. No MPI at build or run
//     time. Used when the binary was built without MPI or was not started by mpirun.
//   - MPI (llmc/comm_mpi.c, built when mk/config.mk finds mpicc): moves host memory. Ranks are the
//     processes of `mpirun -np N`. A binary built with MPI but started without mpirun runs as
//     the single-process implementation and never calls MPI_Init (set LLMC_COMM=mpi to force an
//     OpenMPI singleton instead).
//   - NCCL (llmc/cuda/comm_nccl.cu, CUDA builds): moves device memory, bootstrapped over the MPI
//     implementation. It serves only the comm_dev_* calls; host calls keep going through MPI.
//
// Host calls (comm_allreduce_sum_f32, ...) take host memory. Device calls (comm_dev_*) take
// buffers of the backend's "device" memory and a stream: with NCCL attached they are NCCL calls on
// that stream; without it (CPU backend, CUDA-on-CPU harness, where device memory is host memory)
// they route to the host implementation and run synchronously.
//
// Determinism: every floating-point sum is computed in a fixed order that depends only on the
// world size: for each element, the contributions of ranks 0, 1, ..., N-1 are added in that order
// in double precision and rounded once to the buffer's type (f64 sums: added in rank order in
// double). Results are therefore bit-identical from run to run for the same N, identical on every
// rank, and independent of message sizes or the MPI library's algorithm choice. Across different
// N they agree only to rounding (the per-rank partial sums differ), which is expected.
// (NCCL's own reduction order is fixed for a given topology and NCCL version; see comm_nccl.cu.)
//
// Failures: with world > 1, comm_init installs a fatal hook (llmc/check.h) that calls
// MPI_Abort, so a fatal() on any rank ends every rank. A rank that dies any other way (signal,
// OOM kill, exit without comm_finalize) makes mpirun kill the remaining ranks: that is OpenMPI's
// default (mpirun aborts the job when a process exits abnormally), so no rank waits forever in a
// collective for a peer that is gone. test/test_comm.sh checks both cases.
//
// All collectives must be called by every rank in the same order with the same sizes (the MPI
// rule); sizes are element counts unless the name says bytes.
#ifndef LLMC_COMM_H
#define LLMC_COMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    COMM_SINGLE = 0, // one process, no MPI
    COMM_MPI = 1,    // MPI over MPI_COMM_WORLD
} CommImpl;

typedef enum {
    COMM_DEV_HOST = 0, // comm_dev_* route to the host implementation (memory is host memory)
    COMM_DEV_NCCL = 1, // comm_dev_* are NCCL calls (after comm_nccl_attach)
} CommDevImpl;

typedef enum {
    COMM_F32 = 0,
    COMM_BF16 = 1, // stored as uint16 (upper half of an fp32); sums computed in fp32/double, rounded to nearest even
} CommDtype;

typedef struct {
    int rank, world;             // this process and the number of processes
    int local_rank, local_world; // within this node (pick the GPU with local_rank)
    CommImpl impl;
    CommDevImpl dev_impl;
    // implementation state (opaque to users)
    void* scratch;               // MPI: receive buffer for reductions, allocated once in comm_init
    size_t scratch_bytes;
    void* conv;                  // MPI: f32 staging for bf16 device calls on the host path
    size_t conv_bytes;
    void* mpi;                   // MPI state (our duplicate of MPI_COMM_WORLD)
    const struct CommDevOps* dev_ops; // NULL: host path; set by comm_nccl_attach
    void* nccl;                  // NCCL state, set by comm_nccl_attach
} Comm;

// Starts the communication layer (call first thing in main; MPI may consume its arguments).
// Picks MPI when this build has MPI and the process was started by mpirun / a PMI launcher (or
// LLMC_COMM=mpi), else the single-process implementation. Fatal if the process was started as
// one of several ranks but this build has no MPI (every rank would think it is rank 0).
void comm_init(Comm* c, int* argc, char*** argv);
// Ends it (MPI_Finalize after a barrier). Call on the normal exit path of every rank.
void comm_finalize(Comm* c);
// Ends every rank with this exit code (MPI_Abort; exit() when world == 1). Does not return.
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
void comm_abort(Comm* c, int code);
// The fatal hook comm_init installs when world > 1 (MPI_Abort of the whole job). A program that
// installs its own hook with llmc_set_fatal_hook afterwards must call this at the end of it.
void comm_fatal_hook(void);
// Name of the implementation in use, for logs: "single", "mpi", "mpi+nccl", "single+cuda".
const char* comm_impl_name(const Comm* c);
// 1 if this build contains the MPI implementation.
int comm_have_mpi(void);

void comm_barrier(Comm* c);

// In-place sums over all ranks; on return every rank holds the same sum.
void comm_allreduce_sum_f32(Comm* c, float* buf, size_t n);
void comm_allreduce_sum_f64(Comm* c, double* buf, size_t n);
void comm_allreduce_sum_i64(Comm* c, int64_t* buf, size_t n);
// Elementwise max over ranks (e.g. "did any rank see a non-finite value", timings).
void comm_allreduce_max_f64(Comm* c, double* buf, size_t n);

// send: world*shard elements (block r is destined for rank r); recv: shard elements, receiving the
// sum over ranks of block `rank`. In place is allowed: recv == send + rank*shard. (ZeRO-1.)
void comm_reduce_scatter_sum_f32(Comm* c, const float* send, float* recv, size_t shard);
// send_shard: shard elements; recv_full: world*shard elements, block r = rank r's send_shard.
// In place is allowed: send_shard == recv_full + rank*shard. (ZeRO-1/2 parameter all-gather.)
void comm_allgather_f32(Comm* c, const float* send_shard, float* recv_full, size_t shard);
// Sum over ranks of send[0..n) lands in recv on rank `root` only (recv is ignored elsewhere and may
// be NULL there). In place (recv == send) is allowed. (ZeRO-2: reduce a segment to its owner.)
void comm_reduce_sum_f32(Comm* c, const float* send, float* recv, size_t n, int root);
// Copies bytes from rank root to every rank.
void comm_broadcast(Comm* c, void* buf, size_t bytes, int root);
// Number of ranks whose buf (bytes long on every rank) differs from rank 0's; the same answer on
// every rank. For checks that all ranks agree (config, flags, data files, resume step): compares a
// 64-bit hash of the bytes, so a difference goes unnoticed only with probability ~2^-64.
int comm_count_differing(Comm* c, const void* buf, size_t bytes);

// ---------------------------------------------------------------------------------------------
// Device collectives. Same semantics as the host calls above, on device buffers of type dt,
// enqueued on `stream` (a cudaStream_t, or NULL). Without NCCL they run synchronously on the
// host implementation (the stream is ignored). Between comm_dev_group_begin/end, NCCL calls are
// fused into one launch (use it for the per-owner reduces of a ZeRO-2 bucket); on the host
// implementation the group calls do nothing.
void comm_dev_allreduce_sum(Comm* c, void* buf, size_t n, CommDtype dt, void* stream);
void comm_dev_reduce_scatter_sum(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream);
void comm_dev_allgather(Comm* c, const void* send_shard, void* recv_full, size_t shard, CommDtype dt, void* stream);
void comm_dev_reduce_sum(Comm* c, const void* send, void* recv, size_t n, CommDtype dt, int root, void* stream);
void comm_dev_broadcast(Comm* c, void* buf, size_t bytes, int root, void* stream);
void comm_dev_group_begin(Comm* c);
void comm_dev_group_end(Comm* c);

// Implemented in llmc/cuda/comm_nccl.cu (CUDA builds only): creates the NCCL communicator for
// the ranks of c on the current CUDA device (ncclGetUniqueId on rank 0, broadcast over c,
// ncclCommInitRank) and switches comm_dev_* to NCCL. Call it after cudaSetDevice(c->local_rank),
// also with a single rank (the device calls then become device-to-device copies; the host path
// would touch device pointers). comm_nccl_detach destroys it (call before comm_finalize). The
// CUDA-on-CPU harness build does not attach: its device memory is host memory.
void comm_nccl_attach(Comm* c);
void comm_nccl_detach(Comm* c);

#ifdef __cplusplus
}
#endif
#endif // LLMC_COMM_H
