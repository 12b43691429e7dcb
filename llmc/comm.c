// Dispatch for llmc/comm.h, the single-process implementation, and the host path of the device
// calls. The MPI implementation lives in comm_mpi.c; this file needs no MPI headers.
#include <string.h>
#include <stdlib.h>
#include "comm_internal.h"
#include "check.h"
#include "bf16.h"

int comm_have_mpi(void) {
#ifdef LLMC_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

// Did an MPI launcher start this process? OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; MPICH's
// hydra and Slurm's PMI set PMI_SIZE; PMIx launchers set PMIX_RANK. Returns the world size the
// launcher announced (0 when it did not say), or -1 when no launcher is detected.
static int launcher_world(void) {
    const char* vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE" };
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char* v = getenv(vars[i]);
        if (v && v[0]) return atoi(v);
    }
    if (getenv("PMIX_RANK")) return 0;
    return -1;
}

#ifndef LLMC_HAVE_MPI
static int single_rank_hint(void) {
    const char* v = getenv("OMPI_COMM_WORLD_RANK");
    if (!v) v = getenv("PMI_RANK");
    if (!v) v = getenv("PMIX_RANK");
    return v ? atoi(v) : 0;
}
#endif

void comm_init(Comm* c, int* argc, char*** argv) {
    memset(c, 0, sizeof(*c));
    c->rank = 0; c->world = 1; c->local_rank = 0; c->local_world = 1;
    c->impl = COMM_SINGLE; c->dev_impl = COMM_DEV_HOST;
    int lw = launcher_world();
    const char* force = getenv("LLMC_COMM");
    int want_mpi = lw >= 0 || (force && strcmp(force, "mpi") == 0);
    if (force && force[0] && strcmp(force, "mpi") != 0 && strcmp(force, "auto") != 0)
        fatal("LLMC_COMM may be 'auto' (default) or 'mpi'", "LLMC_COMM='%s' is not a known setting", force);
#ifdef LLMC_HAVE_MPI
    if (want_mpi) comm_mpi_init(c, argc, argv);
#else
    (void)argc; (void)argv;
    if (lw > 1 || (lw == 0 && single_rank_hint() != 0))
        fatal("install MPI (Debian: apt-get install libopenmpi-dev openmpi-bin) and rebuild with `make clean && make`",
              "this process was started by an MPI launcher as one of %d ranks, but this build has no MPI support"
              " (every rank would run as rank 0 of 1)", lw > 0 ? lw : 2);
    if (force && strcmp(force, "mpi") == 0)
        fatal("install MPI (Debian: apt-get install libopenmpi-dev openmpi-bin) and rebuild",
              "LLMC_COMM=mpi was set, but this build has no MPI support");
    (void)want_mpi;
#endif
}

void comm_finalize(Comm* c) {
#ifdef LLMC_HAVE_MPI
    if (c->impl == COMM_MPI) comm_mpi_finalize(c);
#endif
    c->impl = COMM_SINGLE; c->world = 1; c->rank = 0;
}

void comm_abort(Comm* c, int code) {
    fflush(stdout); fflush(stderr);
#ifdef LLMC_HAVE_MPI
    if (c->impl == COMM_MPI) comm_mpi_abort(c, code);
#endif
    exit(code);
}

void comm_fatal_hook(void) {
#ifdef LLMC_HAVE_MPI
    comm_mpi_fatal_hook();
#endif
}

const char* comm_impl_name(const Comm* c) {
    if (c->dev_ops) return c->dev_ops->name;
    return c->impl == COMM_MPI ? "mpi" : "single";
}

// True when collectives must talk to other processes.
static int multi(const Comm* c) {
#ifdef LLMC_HAVE_MPI
    return c->impl == COMM_MPI && c->world > 1;
#else
    (void)c; return 0;
#endif
}

static void check_root(const Comm* c, int root, const char* what) {
    if (root < 0 || root >= c->world) fatal(NULL, "%s: root %d is not a rank of this %d-rank run", what, root, c->world);
}

void comm_barrier(Comm* c) {
#ifdef LLMC_HAVE_MPI
    if (multi(c)) comm_mpi_barrier(c);
#endif
    (void)c;
}

void comm_allreduce_sum_f32(Comm* c, float* buf, size_t n) {
#ifdef LLMC_HAVE_MPI
    if (multi(c)) { comm_mpi_allreduce_sum_f32(c, buf, n); return; }
#endif
    (void)c; (void)buf; (void)n;
}

void comm_allreduce_sum_f64(Comm* c, double* buf, size_t n) {
#ifdef LLMC_HAVE_MPI
    if (multi(c)) { comm_mpi_allreduce_sum_f64(c, buf, n); return; }
#endif
    (void)c; (void)buf; (void)n;
}

void comm_allreduce_sum_i64(Comm* c, int64_t* buf, size_t n) {
#ifdef LLMC_HAVE_MPI
    if (multi(c)) { comm_mpi_allreduce_sum_i64(c, buf, n); return; }
#endif
    (void)c; (void)buf; (void)n;
}

void comm_allreduce_max_f64(Comm* c, double* buf, size_t n) {
#ifdef LLMC_HAVE_MPI
    if (multi(c)) { comm_mpi_allreduce_max_f64(c, buf, n); return; }
#endif
    (void)c; (void)buf; (void)n;
}

void comm_reduce_scatter_sum_f32(Comm* c, const float* send, float* recv, size_t shard) {
#ifdef LLMC_HAVE_MPI
    if (multi(c)) { comm_mpi_reduce_scatter_sum_f32(c, send, recv, shard); return; }
#endif
    if (recv != send && shard) memmove(recv, send, shard * sizeof(float));
}

void comm_allgather_f32(Comm* c, const float* send_shard, float* recv_full, size_t shard) {
#ifdef LLMC_HAVE_MPI
    if (multi(c)) { comm_mpi_allgather_bytes(c, send_shard, recv_full, shard * sizeof(float)); return; }
#endif
    if (recv_full != send_shard && shard) memmove(recv_full, send_shard, shard * sizeof(float));
}

void comm_reduce_sum_f32(Comm* c, const float* send, float* recv, size_t n, int root) {
    check_root(c, root, "comm_reduce_sum_f32");
#ifdef LLMC_HAVE_MPI
    if (multi(c)) { comm_mpi_reduce_sum_f32(c, send, recv, n, root); return; }
#endif
    if (recv != send && n) memmove(recv, send, n * sizeof(float));
}

void comm_broadcast(Comm* c, void* buf, size_t bytes, int root) {
    check_root(c, root, "comm_broadcast");
#ifdef LLMC_HAVE_MPI
    if (multi(c)) { comm_mpi_broadcast(c, buf, bytes, root); return; }
#endif
    (void)buf; (void)bytes;
}

int comm_count_differing(Comm* c, const void* buf, size_t bytes) {
    uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a, 64 bit
    const unsigned char* p = (const unsigned char*)buf;
    for (size_t i = 0; i < bytes; i++) { h ^= p[i]; h *= 0x100000001b3ULL; }
    h ^= (uint64_t)bytes * 0x9e3779b97f4a7c15ULL;
    uint64_t h0 = h;
    comm_broadcast(c, &h0, sizeof(h0), 0);
    int64_t differs = h0 != h;
    comm_allreduce_sum_i64(c, &differs, 1);
    return (int)differs;
}

// ---------------------------------------------------------------------------------------------
// Device calls. With NCCL attached they go to its table. Otherwise device memory is host memory
// (CPU backend, CUDA-on-CPU harness) and they run on the host implementation; bf16 buffers are
// widened to f32 in the staging buffer c->conv chunk by chunk, summed there and rounded back.

static size_t dt_size(CommDtype dt) {
    switch (dt) {
        case COMM_F32: return 4;
        case COMM_BF16: return 2;
    }
    fatal(NULL, "unknown CommDtype %d", (int)dt);
}

static void widen(float* dst, const uint16_t* src, size_t n) { for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]); }
static void narrow(uint16_t* dst, const float* src, size_t n) { for (size_t i = 0; i < n; i++) dst[i] = bf16_from_f32(src[i]); }
static size_t conv_elems(const Comm* c) { return c->conv_bytes / sizeof(float); }

void comm_dev_allreduce_sum(Comm* c, void* buf, size_t n, CommDtype dt, void* stream) {
    if (c->dev_ops) { c->dev_ops->allreduce_sum(c, buf, n, dt, stream); return; }
    if (dt == COMM_F32) { comm_allreduce_sum_f32(c, (float*)buf, n); return; }
    (void)dt_size(dt);
    if (!multi(c)) return;
    uint16_t* b = (uint16_t*)buf; float* f = (float*)c->conv; size_t cap = conv_elems(c);
    for (size_t off = 0; off < n; off += cap) {
        size_t len = n - off < cap ? n - off : cap;
        widen(f, b + off, len);
        comm_allreduce_sum_f32(c, f, len);
        narrow(b + off, f, len);
    }
}

void comm_dev_reduce_scatter_sum(Comm* c, const void* send, void* recv, size_t shard, CommDtype dt, void* stream) {
    if (c->dev_ops) { c->dev_ops->reduce_scatter_sum(c, send, recv, shard, dt, stream); return; }
    if (dt == COMM_F32) { comm_reduce_scatter_sum_f32(c, (const float*)send, (float*)recv, shard); return; }
    size_t es = dt_size(dt);
    if (!multi(c)) { if (recv != send && shard) memmove(recv, send, shard * es); return; }
    // stage world blocks of len elements plus len results: (world + 1) * len floats
    const uint16_t* s = (const uint16_t*)send; uint16_t* r = (uint16_t*)recv; float* f = (float*)c->conv;
    size_t cap = conv_elems(c) / (size_t)(c->world + 1);
    for (size_t off = 0; off < shard; off += cap) {
        size_t len = shard - off < cap ? shard - off : cap;
        for (int q = 0; q < c->world; q++) widen(f + (size_t)q * len, s + (size_t)q * shard + off, len);
        float* out = f + (size_t)c->world * len;
        comm_reduce_scatter_sum_f32(c, f, out, len);
        narrow(r + off, out, len);
    }
}

void comm_dev_allgather(Comm* c, const void* send_shard, void* recv_full, size_t shard, CommDtype dt, void* stream) {
    if (c->dev_ops) { c->dev_ops->allgather(c, send_shard, recv_full, shard, dt, stream); return; }
    size_t es = dt_size(dt);
#ifdef LLMC_HAVE_MPI
    if (multi(c)) { comm_mpi_allgather_bytes(c, send_shard, recv_full, shard * es); return; }
#endif
    if (recv_full != send_shard && shard) memmove(recv_full, send_shard, shard * es);
}

void comm_dev_reduce_sum(Comm* c, const void* send, void* recv, size_t n, CommDtype dt, int root, void* stream) {
    if (c->dev_ops) { c->dev_ops->reduce_sum(c, send, recv, n, dt, root, stream); return; }
    if (dt == COMM_F32) { comm_reduce_sum_f32(c, (const float*)send, (float*)recv, n, root); return; }
    size_t es = dt_size(dt);
    check_root(c, root, "comm_dev_reduce_sum");
    if (!multi(c)) { if (recv != send && n) memmove(recv, send, n * es); return; }
    const uint16_t* s = (const uint16_t*)send; uint16_t* r = (uint16_t*)recv; float* f = (float*)c->conv;
    size_t cap = conv_elems(c);
    for (size_t off = 0; off < n; off += cap) {
        size_t len = n - off < cap ? n - off : cap;
        widen(f, s + off, len);
        comm_reduce_sum_f32(c, f, f, len, root);
        if (c->rank == root) narrow(r + off, f, len);
    }
}

void comm_dev_broadcast(Comm* c, void* buf, size_t bytes, int root, void* stream) {
    if (c->dev_ops) { c->dev_ops->broadcast(c, buf, bytes, root, stream); return; }
    comm_broadcast(c, buf, bytes, root);
}

void comm_dev_group_begin(Comm* c) { if (c->dev_ops) c->dev_ops->group_begin(c); }
void comm_dev_group_end(Comm* c) { if (c->dev_ops) c->dev_ops->group_end(c); }
