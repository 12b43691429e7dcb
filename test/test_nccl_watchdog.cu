// The watchdog's NCCL path (llmc/comm/comm_watchdog.c + llmc/cuda/comm_nccl.cu) on ONE GPU, in one
// process: the GPU check's "watchdog" section (scripts/gpu_check.sh). No MPI: the communicators
// come from comm_nccl_attach_local (NCCL unique id made here). Each case runs in a child process
// under a 60 s limit (test_run_child_for), so a hang fails the case instead of hanging the check;
// this parent never touches CUDA (the children fork from a process without a CUDA context).
//   init     a non-blocking communicator of 2 ranks whose second rank never joins: the watchdog
//            (timeout 5 s) ends the process, exit 1, naming rank 0 and nccl_init;
//   stuck    a 1-rank communicator, two healthy steps, then a kernel that spins for 60 s on the
//            compute stream before an all-reduce, and the host blocked in a stream
//            synchronization: the watchdog (timeout 5 s) ends the process, exit 1, naming rank 0,
//            the pending device collective and the operation;
//   healthy  the same collectives (all-reduce, reduce-scatter, all-gather, reduce, broadcast, a
//            group, a non-blocking all-gather) behind spin kernels of 2, 2 and 4 s with a 3 s
//            timeout (the 4 s step fits the limit of timeout + slowest step): the watchdog does
//            not trip, the results are the inputs bit for bit (sums over one rank), exit 0.
// Each stuck case reports whether the process ended on its own or through the watchdog's 15 s
// backstop (ncclCommAbort waiting behind the hung kernel); either passes within the 60 s bound.
// What needs 2 GPUs (not covered here): a peer rank that stops (SIGSTOP) while the other waits
// inside an NCCL kernel, and the status queries between ranks over MPI; those run on CPU ranks
// (test/test_watchdog.sh, test/test_comm.sh).
// Usage: test_nccl_watchdog_gpu [init|stuck|healthy ...]   (default: all three)
#include <cuda_runtime.h>
#include <string.h>
#include "../llmc/comm/comm.h"
#include "../llmc/base/check.h"
#include "../llmc/cuda/launch.cuh"
#include "test.h"
#include "test_child.h"

#define CHILD_LIMIT_S 60.0
#define STUCK_TIMEOUT_S 5.0
#define HEALTHY_TIMEOUT_S 3.0
#define N_FLOATS (1 << 20)

#define cudaTestCheck(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    fatal("check the GPU and driver (nvidia-smi)", "%s: %s", #call, cudaGetErrorString(e_)); } while (0)

// One thread keeps the stream busy for `ns` nanoseconds of the GPU's global timer: a kernel that
// is slow (finite) or, for the watchdog, stuck.
__global__ void spin_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
static void spin(double seconds, cudaStream_t s) {
    LAUNCH(spin_kernel, 1, 1, 0, s, (unsigned long long)(seconds * 1e9));
    cudaTestCheck(cudaGetLastError());
}

// The start of every case: the CUDA context exists before the watchdog's clock starts. The cases
// on a 1-rank communicator start the watchdog after its init (nccl_ranks = 1): how long NCCL
// takes to start on a cold machine is not what they measure, and the init case watches an init.
static void case_begin(Comm* c, double timeout_s, int nccl_ranks) {
    comm_init(c, NULL, NULL);
    cudaTestCheck(cudaSetDevice(0));
    cudaTestCheck(cudaFree(0));
    if (nccl_ranks == 1) comm_nccl_attach_local(c, 1);
    comm_watchdog_start(c, timeout_s);
}

static void case_init(void* arg) {
    (void)arg;
    Comm c;
    case_begin(&c, STUCK_TIMEOUT_S, 2);
    comm_watchdog_op(&c, "joining a 2-rank NCCL communicator alone");
    comm_nccl_attach_local(&c, 2);
    fprintf(stderr, "the init of a 2-rank communicator completed with one rank\n");
    fflush(stderr);
    _exit(3);
}

static void case_stuck(void* arg) {
    (void)arg;
    Comm c;
    case_begin(&c, STUCK_TIMEOUT_S, 1);
    float* d = NULL;
    cudaStream_t s;
    cudaTestCheck(cudaMalloc(&d, N_FLOATS * sizeof(float)));
    cudaTestCheck(cudaMemset(d, 0, N_FLOATS * sizeof(float)));
    cudaTestCheck(cudaStreamCreate(&s));
    comm_watchdog_step(&c);
    for (int step = 0; step < 2; step++) {
        comm_watchdog_op(&c, "healthy step %d", step);
        comm_dev_allreduce_sum(&c, d, N_FLOATS, COMM_F32, s);
        cudaTestCheck(cudaStreamSynchronize(s));
        comm_watchdog_step(&c);
    }
    comm_watchdog_op(&c, "step 2: a kernel that hangs");
    spin(CHILD_LIMIT_S, s);
    comm_dev_allreduce_sum(&c, d, N_FLOATS, COMM_F32, s);
    cudaTestCheck(cudaStreamSynchronize(s)); // blocks: only the watchdog can end this
    fprintf(stderr, "the stream synchronized although its kernel spins for %.0f s\n", CHILD_LIMIT_S);
    fflush(stderr);
    _exit(3);
}

// One step of the healthy case: every device collective behind a spin of `seconds`; the result
// (in out) equals in, since sums over one rank are the contributions themselves.
static void healthy_step(Comm* c, double seconds, float* in, float* a, float* b, float* out, cudaStream_t s) {
    const size_t n = N_FLOATS, bytes = n * sizeof(float);
    spin(seconds, s);
    cudaTestCheck(cudaMemcpyAsync(a, in, bytes, cudaMemcpyDeviceToDevice, s));
    comm_dev_allreduce_sum(c, a, n, COMM_F32, s);
    comm_dev_reduce_scatter_sum(c, a, b, n, COMM_F32, s);
    comm_dev_allgather(c, b, a, n, COMM_F32, s);
    comm_dev_reduce_sum(c, a, b, n, COMM_F32, 0, s);
    comm_dev_broadcast(c, b, bytes, 0, s);
    comm_dev_group_begin(c);
    comm_dev_reduce_sum(c, b, a, n / 2, COMM_F32, 0, s);
    comm_dev_reduce_sum(c, b + n / 2, a + n / 2, n / 2, COMM_F32, 0, s);
    comm_dev_group_end(c);
    CommRequest rq = comm_dev_iallgather(c, a, out, n, COMM_F32, s);
    comm_wait(c, &rq);
    cudaTestCheck(cudaStreamSynchronize(s));
}

static void case_healthy(void* arg) {
    (void)arg;
    Comm c;
    case_begin(&c, HEALTHY_TIMEOUT_S, 1);
    printf("implementation: %s\n", comm_impl_name(&c));
    const size_t bytes = N_FLOATS * sizeof(float);
    float *in, *a, *b, *out;
    cudaStream_t s;
    cudaTestCheck(cudaMalloc(&in, bytes)); cudaTestCheck(cudaMalloc(&a, bytes));
    cudaTestCheck(cudaMalloc(&b, bytes)); cudaTestCheck(cudaMalloc(&out, bytes));
    cudaTestCheck(cudaStreamCreate(&s));
    float* h = (float*)mallocCheck(bytes);
    float* got = (float*)mallocCheck(bytes);
    for (size_t i = 0; i < N_FLOATS; i++) h[i] = (float)((double)i * 0.37 - 1000.0);
    cudaTestCheck(cudaMemcpy(in, h, bytes, cudaMemcpyHostToDevice));
    const double spins[] = { 2.0, 2.0, 4.0 };
    comm_watchdog_step(&c);
    for (int step = 0; step < 3; step++) {
        comm_watchdog_op(&c, "healthy step %d: a %.0f s kernel, then collectives", step, spins[step]);
        cudaTestCheck(cudaMemset(out, 0xff, bytes));
        healthy_step(&c, spins[step], in, a, b, out, s);
        comm_watchdog_step(&c);
        cudaTestCheck(cudaMemcpy(got, out, bytes, cudaMemcpyDeviceToHost));
        if (memcmp(got, h, bytes) != 0) fatal(NULL, "step %d: the collectives over one rank changed the data", step);
        printf("step %d: %.0f s kernel + 9 device collectives, results equal to the inputs\n", step, spins[step]);
    }
    comm_nccl_detach(&c);
    comm_finalize(&c);
    free(h); free(got);
    fflush(stdout);
}

// A stuck case: exit 1 within the bound, with the watchdog's verdict containing every `want`.
static void expect_stuck(const char* name, TestChildFn fn, double timeout_s, const char* const* want) {
    char out[16384];
    double secs = 0.0;
    const int failures = test_failures;
    int rc = test_run_child_for(fn, NULL, out, sizeof(out), CHILD_LIMIT_S, &secs);
    int backstop = strstr(out, "did not end within") != NULL;
    TEST_CHECK(rc == 1, "%s: exit %d (want 1; %d: still running after %.0f s, killed)", name, rc, TEST_CHILD_TIMED_OUT, CHILD_LIMIT_S);
    for (const char* const* w = want; *w; w++) TEST_CHECK(strstr(out, *w) != NULL, "%s: the message lacks '%s'", name, *w);
    TEST_CHECK(secs >= timeout_s, "%s: ended after %.1f s, before the %.0f s timeout", name, secs, timeout_s);
    if (test_failures != failures) fprintf(stderr, "%s: its stderr:\n%s\n", name, out);
    else printf("ok   %s: exit 1 after %.1f s (timeout %.0f s), %s\n     %s", name, secs, timeout_s,
                backstop ? "ended by the watchdog's backstop (the NCCL abort or the exit path hung)" : "ended without the backstop",
                strstr(out, "error: ") ? strstr(out, "error: ") : out);
}

static void expect_healthy(void) {
    char out[16384];
    double secs = 0.0;
    int rc = test_run_child_for(case_healthy, NULL, out, sizeof(out), CHILD_LIMIT_S, &secs);
    TEST_CHECK(rc == 0 && !strstr(out, "error"), "healthy: exit %d after %.1f s; stderr:\n%s", rc, secs, out);
    if (rc == 0) printf("ok   healthy: kernels of 2, 2, 4 s with a %.0f s timeout, exit 0 after %.1f s\n", HEALTHY_TIMEOUT_S, secs);
}

int main(int argc, char** argv) {
    static const char* const want_init[] = { "error: watchdog: STUCK: rank 0 has waited", "in nccl_init",
                                             "'joining a 2-rank NCCL communicator alone'", NULL };
    static const char* const want_stuck[] = { "error: watchdog: STUCK: rank 0 has a device collective dev_allreduce pending",
                                              "'step 2: a kernel that hangs'", NULL };
    int ran = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "init") && strcmp(argv[i], "stuck") && strcmp(argv[i], "healthy"))
            fatal("cases: init, stuck, healthy (default: all)", "test_nccl_watchdog: unknown case '%s'", argv[i]);
    for (int i = 0; i < 3; i++) {
        static const char* const names[] = { "init", "stuck", "healthy" };
        int want = argc == 1;
        for (int k = 1; k < argc; k++) want |= strcmp(argv[k], names[i]) == 0;
        if (!want) continue;
        ran++;
        if (i == 0) expect_stuck("init", case_init, STUCK_TIMEOUT_S, want_init);
        if (i == 1) expect_stuck("stuck", case_stuck, STUCK_TIMEOUT_S, want_stuck);
        if (i == 2) expect_healthy();
    }
    return ran ? test_finish("test_nccl_watchdog") : 1;
}
