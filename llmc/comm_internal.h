// Internal interface between llmc/comm.c (dispatch + single process), llmc/comm_mpi.c (MPI) and
// llmc/cuda/comm_nccl.cu (NCCL). Users include llmc/comm.h only.
#ifndef LLMC_COMM_INTERNAL_H
#define LLMC_COMM_INTERNAL_H

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

// The MPI implementation; defined only in builds with LLMC_HAVE_MPI. Called by comm.c only when
// c->impl == COMM_MPI and c->world > 1 (world 1 is handled by comm.c without MPI traffic).
void comm_mpi_init(Comm* c, int* argc, char*** argv);
void comm_mpi_finalize(Comm* c);
void comm_mpi_abort(Comm* c, int code);
void comm_mpi_fatal_hook(void);
void comm_mpi_barrier(Comm* c);
void comm_mpi_allreduce_sum_f32(Comm* c, float* buf, size_t n);
void comm_mpi_allreduce_sum_f64(Comm* c, double* buf, size_t n);
void comm_mpi_allreduce_sum_i64(Comm* c, int64_t* buf, size_t n);
void comm_mpi_allreduce_max_f64(Comm* c, double* buf, size_t n);
void comm_mpi_reduce_scatter_sum_f32(Comm* c, const float* send, float* recv, size_t shard);
void comm_mpi_allgather_bytes(Comm* c, const void* send_shard, void* recv_full, size_t shard_bytes);
void comm_mpi_reduce_sum_f32(Comm* c, const float* send, float* recv, size_t n, int root);
void comm_mpi_broadcast(Comm* c, void* buf, size_t bytes, int root);

// Device-call table installed by comm_nccl_attach.
typedef struct CommDevOps {
    const char* name; // for comm_impl_name
    void (*allreduce_sum)(Comm*, void*, size_t, CommDtype, void*);
    void (*reduce_scatter_sum)(Comm*, const void*, void*, size_t, CommDtype, void*);
    void (*allgather)(Comm*, const void*, void*, size_t, CommDtype, void*);
    void (*reduce_sum)(Comm*, const void*, void*, size_t, CommDtype, int, void*);
    void (*broadcast)(Comm*, void*, size_t, int, void*);
    void (*group_begin)(Comm*);
    void (*group_end)(Comm*);
} CommDevOps;

#ifdef __cplusplus
}
#endif
#endif // LLMC_COMM_INTERNAL_H
