// CPU backend: lifetime, capabilities, memory and copies (plain host memory), device selection (the
// host is the one device), and the environment the backend needs before main(). The ops live in
// the other files of llmc/cpu/, split as llmc/ops/ops.h groups them; their semantics (accumulating
// backwards, NULL gradients, ignored targets, padded vocab) are documented in ops.h and tested in
// test/test_ops.c.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <omp.h>
#include <cblas.h>
#include "cpu/gemm.h"
#include "cpu/ops_cpu.h"
#include "base/check.h"

// ----------------------------------------------------------------------------
// the environment the CPU backend needs before main()
//
// Two settings are only read from the environment, by library constructors that run before
// main(), so the program cannot make them later:
// 1. OPENBLAS_CORETYPE. Debian's OpenBLAS is a DYNAMIC_ARCH build: it picks its kernel set once,
//    from CPUID or from this variable. CPUs it does not recognise (new models, virtual machines
//    that mask the model number) get Prescott (SSE3) kernels, a third of the SkylakeX kernels'
//    speed (docs/CPU.md, "Threading"). On CPUs with AVX-512 we name the kernels ourselves:
//    Cooperlake (SkylakeX + bf16) where AVX512-BF16 is present, SkylakeX otherwise.
// 2. OMP_WAIT_POLICY=passive. Two thread pools share the cores: OpenBLAS' (GEMMs) and OpenMP's
//    (all other ops). With libgomp's default, an OpenMP thread that finished its part keeps
//    spinning on its core while the next GEMM's OpenBLAS threads want it. Waking a sleeping
//    thread costs microseconds per op; ops take milliseconds. With bf16 GEMMs (--dtype bf16, or
//    auto on a CPU with native bf16) OpenBLAS never runs: the GEMMs are oneDNN's or ours, on the
//    OpenMP threads too, so there is no second pool to make room for, and a sleeping thread's
//    wake-up is paid at every parallel loop. There a short spin (GOMP_SPINCOUNT=3000, a few
//    microseconds) before sleeping instead; the threads still sleep between steps and while
//    another rank runs. What each setting costs and saves: docs/CPU.md ("Threading").
// setenv() that early does not stick (libc installs the original environment array when it
// initialises), so an ELF .preinit_array entry -- it runs before every shared library's
// constructor and is given argv and envp -- re-executes the program once with the missing
// settings added. Nothing has happened yet at that point (no file opened, no output, no MPI),
// so the re-exec is invisible apart from the variables. A variable the user has set is never
// changed; LLMC_NO_REEXEC=1 turns the mechanism off; non-Linux systems do without it.
// ops_init() warns once if OpenBLAS still runs slow kernels on an AVX-512 CPU.
static int cpu_avx512_ok(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

#if defined(__linux__) && defined(__GNUC__)
static int env_has(char** envp, const char* name) {   // getenv() is not usable this early
    size_t len = strlen(name);
    for (char** e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') return 1;
    return 0;
}

// Whether this run's GEMMs will be bf16 through oneDNN, from --dtype as cli_apply_dtype will read
// it (main() refuses a bad value later; here anything but fp32 / bf16 / fp16 counts as auto; fp16
// runs OpenBLAS' sgemm, as fp32 does), and for auto
// LLMC_CPU_BF16 as cpu_ops_bf16_native reads it (a bad value is refused later too).
static int preinit_gemm_bf16(int argc, char** argv, char** envp) {
    const char* dtype = "auto";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) dtype = argv[i + 1];
        else if (strncmp(argv[i], "--dtype=", 8) == 0) dtype = argv[i] + 8;
    }
    if (strcmp(dtype, "fp32") == 0 || strcmp(dtype, "fp16") == 0) return 0;
    if (strcmp(dtype, "bf16") == 0) return 1;
    for (char** e = envp; *e != NULL; e++)
        if (strcmp(*e, "LLMC_CPU_BF16=0") == 0) return 0;
    const char* why;
    return cpu_ops_bf16_hw(&why);
}

static void cpu_preinit(int argc, char** argv, char** envp) {
    if (argv == NULL || envp == NULL || env_has(envp, "LLMC_NO_REEXEC")) return;
    static char coretype[] = "OPENBLAS_CORETYPE=SkylakeX";
    static char coretype_bf16[] = "OPENBLAS_CORETYPE=Cooperlake";
    static char wait_policy[] = "OMP_WAIT_POLICY=passive";
    static char spin_short[] = "GOMP_SPINCOUNT=3000";
    char* add[2];
    int nadd = 0;
    if (!env_has(envp, "OPENBLAS_CORETYPE") && cpu_avx512_ok()) {
#if defined(__x86_64__)
        add[nadd++] = __builtin_cpu_supports("avx512bf16") ? coretype_bf16 : coretype;
#else
        add[nadd++] = coretype;
#endif
    }
    if (!env_has(envp, "OMP_WAIT_POLICY") && !env_has(envp, "GOMP_SPINCOUNT"))
        add[nadd++] = preinit_gemm_bf16(argc, argv, envp) ? spin_short : wait_policy;
    if (nadd == 0) return;
    size_t n = 0;
    while (envp[n] != NULL) n++;
    char** env = (char**)malloc((n + (size_t)nadd + 1) * sizeof(char*));
    if (env == NULL) return;
    memcpy(env, envp, n * sizeof(char*));
    for (int i = 0; i < nadd; i++) env[n + (size_t)i] = add[i];
    env[n + (size_t)nadd] = NULL;
    execve("/proc/self/exe", argv, env);
    free(env);   // exec failed (no /proc?): carry on with the libraries' defaults
}

__attribute__((section(".preinit_array"), used))
static void (*const cpu_preinit_entry)(int, char**, char**) = cpu_preinit;
#endif

// ----------------------------------------------------------------------------
// backend lifetime and memory

static char cpu_name[160];

// OpenBLAS kernel sets that use AVX-512 for sgemm (openblas_get_corename() spellings).
static int core_is_avx512(const char* core) {
    static const char* fast[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; i < sizeof(fast) / sizeof(fast[0]); i++)
        if (strncasecmp(core, fast[i], strlen(fast[i])) == 0) return 1;
    return 0;
}

void cpu_ops_init(int threads) {
    if (threads <= 0) threads = omp_get_max_threads(); // OMP_NUM_THREADS, else all cores
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    const char* core = openblas_get_corename();
    // Only reached when the re-exec above could not steer OpenBLAS (a build without
    // DYNAMIC_ARCH, LLMC_NO_REEXEC) or the user forced slower kernels: say so once, with the fix.
    static int warned = 0;
    if (!warned && cpu_avx512_ok() && core != NULL && !core_is_avx512(core)) {
        warned = 1;
        fprintf(stderr, "warning: OpenBLAS is using its %s kernels on this AVX-512 CPU, so matmuls "
                "run up to several times slower than they could.\n  fix: run with "
                "OPENBLAS_CORETYPE=SkylakeX in the environment (Cooperlake on CPUs with "
                "AVX512-BF16); this needs an OpenBLAS built with DYNAMIC_ARCH, as Debian's is\n", core);
    }
    char* cfg = openblas_get_config();
    const char* ver = (cfg && strncmp(cfg, "OpenBLAS ", 9) == 0) ? cfg + 9 : "?";
    char verbuf[32];
    size_t k = 0;
    while (ver[k] && ver[k] != ' ' && k + 1 < sizeof(verbuf)) { verbuf[k] = ver[k]; k++; }
    verbuf[k] = '\0';
    snprintf(cpu_name, sizeof(cpu_name), "cpu (OpenBLAS %s, %s kernels, %d thread%s)", verbuf,
             core ? core : "?", threads, threads == 1 ? "" : "s");
}

const char* cpu_ops_backend_name(void) {
    if (cpu_name[0] == '\0') cpu_ops_init(0);
    return cpu_name;
}

void* cpu_ops_alloc(size_t bytes) {
    // 64-byte aligned (one cache line, one AVX-512 vector); aligned_alloc wants a multiple
    size_t sz = (bytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    void* p = aligned_alloc(64, sz);
    if (p == NULL)
        fatal("reduce the batch size / sequence length, or use a machine with more memory",
              "out of memory allocating %zu bytes for the CPU backend", bytes);
    return p;
}

void cpu_ops_free(void* p) { free(p); }
void cpu_ops_zero(void* p, size_t bytes) { if (bytes) memset(p, 0, bytes); }
void cpu_ops_to_device(void* dst, const void* src_host, size_t bytes) { if (bytes) memcpy(dst, src_host, bytes); }
void cpu_ops_to_host(void* dst_host, const void* src, size_t bytes) { if (bytes) memcpy(dst_host, src, bytes); }
void cpu_ops_memcpy(void* dst, const void* src, size_t bytes) { if (bytes) memcpy(dst, src, bytes); }
void cpu_ops_to_device_async(void* dst, const void* src_host, size_t bytes) { if (bytes) memcpy(dst, src_host, bytes); }
// the offload's copies (ops_copy_*): host memory both sides, done at once
void cpu_ops_copy(void* dst, const void* src, size_t bytes) { if (bytes) memcpy(dst, src, bytes); }
void cpu_ops_upload_f32(float* dst, const float* src_host, size_t n) { if (n) memcpy(dst, src_host, n * sizeof(float)); }
void cpu_ops_download_f32(float* dst_host, const float* src, size_t n) { if (n) memcpy(dst_host, src, n * sizeof(float)); }
void cpu_ops_synchronize(void) {}
void cpu_ops_set_deterministic(int on) { (void)on; } // every CPU op is deterministic

OpsCaps cpu_ops_caps(void) {
    // fp32 parameters: AdamW updates them directly; attention keeps packed records apart
    OpsCaps caps = { OPS_F32, sizeof(float), 0, 1, 0 };
    const OpsDtype d = cpu_ops_gemm_dtype();
    if (d == OPS_F16 || (d == OPS_BF16 && cpu_gemm_bf16_widened())) caps.gemm_widen_bytes = CPU_GEMM_WIDEN_BYTES;
    return caps;
}

// ----------------------------------------------------------------------------
// device selection: nothing to select, and the host collectives (llmc/comm/comm.h) move the buffers

void cpu_device_select(const Comm* c) { (void)c; }
void cpu_device_attach(Comm* c) { (void)c; }
void cpu_device_detach(Comm* c) { (void)c; }
int cpu_device_memory(size_t* free_bytes, size_t* total_bytes) { *free_bytes = *total_bytes = 0; return 0; }
