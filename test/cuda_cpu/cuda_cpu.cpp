// CUDA-on-CPU harness runtime: fiber scheduler for kernels, and the CUDA runtime API calls the
// project uses, implemented on host memory. See cuda_cpu.h for the model. Test code only.
//
// Environment:
//   CUDA_CPU_ORDER   = forward (default) | reverse | random:<seed>   order in which the fibers of a
//                      block are resumed after each barrier / warp rendezvous
//   CUDA_CPU_THREADS = N (default 1)   OS threads taking blocks (2 under TSan: races between blocks)
//   CUDA_CPU_STACK_KB= fiber stack size (default 256; sanitizer builds use more stack)
//   CUDA_CPU_VERBOSE = 1               print every launch
//   CUDA_CPU_TIMEOUT = seconds a single launch may run before the process stops with a message
//                      (default 300, 0 = none): a thread that spins on memory another thread or
//                      block writes never gives up its fiber, so it would hang forever
//   CUDA_CPU_UCONTEXT= 1               switch fibers with swapcontext (the default on x86-64 is a
//                                      20x faster hand-written switch)
#include "cuda_cpu.h"

#include <stdarg.h>
#include <stdlib.h>
#include <errno.h>
#include <ucontext.h>
#include <unistd.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_CPU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDA_CPU_ASAN 1
#endif
#endif
#ifdef CUDA_CPU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef CUDA_CPU_TSAN
#include <sanitizer/tsan_interface.h>
// The scheduler's own bookkeeping (fiber states, warp slots) is touched by every fiber; it must
// be invisible to TSan, or it would both report false races and create happens-before edges
// that hide the real ones. Only the barriers create happens-before, explicitly.
#define NOTSAN __attribute__((no_sanitize("thread"), noinline))
// (the TSan runtime's dynamic annotations: stop a lock from ordering fibers, ptx_check_shared)
extern "C" void AnnotateIgnoreSyncBegin(const char* file, int line);
extern "C" void AnnotateIgnoreSyncEnd(const char* file, int line);
#else
#define NOTSAN
#endif

extern "C" const int warpSize = 32;
__thread cuda_cpu::FiberHead* cuda_cpu_cur;
__thread uint3 cuda_cpu_blockIdx;
__thread uint3 cuda_cpu_blockDim;
__thread uint3 cuda_cpu_gridDim;

// ---------------------------------------------------------------------------------------------
// Dynamic shared memory: one per-OS-thread buffer with every name kernels may give to
// `extern __shared__ T name[]`. Add a name here if a kernel needs another one.
#define CUDA_CPU_DYN_SMEM_MAX 232448  // 227 KB: sharedMemPerBlockOptin of sm_90
__thread unsigned char cuda_cpu_dyn_smem[CUDA_CPU_DYN_SMEM_MAX] __attribute__((aligned(256)));
#define CUDA_CPU_DYN_SMEM_NAME(n) \
    extern __thread unsigned char n[CUDA_CPU_DYN_SMEM_MAX] __attribute__((alias("cuda_cpu_dyn_smem")));
CUDA_CPU_DYN_SMEM_NAME(smem)
CUDA_CPU_DYN_SMEM_NAME(shared)
CUDA_CPU_DYN_SMEM_NAME(sdata)
CUDA_CPU_DYN_SMEM_NAME(shmem)
CUDA_CPU_DYN_SMEM_NAME(smem_buf)
CUDA_CPU_DYN_SMEM_NAME(shared_mem)
CUDA_CPU_DYN_SMEM_NAME(shared_memory)
CUDA_CPU_DYN_SMEM_NAME(dyn_smem)
CUDA_CPU_DYN_SMEM_NAME(dynamic_smem)
CUDA_CPU_DYN_SMEM_NAME(s_data)
CUDA_CPU_DYN_SMEM_NAME(sbuf)

namespace cuda_cpu {

enum State { RUNNABLE = 0, BAR_WAIT, WARP_WAIT, DONE };
static const char* state_name(int s) {
    switch (s) { case RUNNABLE: return "runnable"; case BAR_WAIT: return "__syncthreads";
                 case WARP_WAIT: return "warp op"; default: return "exited"; }
}
static const char* op_name(int op) {
    static const char* n[] = {"?", "__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                              "__shfl_xor_sync", "__ballot_sync", "__all_sync", "__any_sync",
                              "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                              "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
                              "__match_any_sync", "mma.m16n8k16", "ldmatrix.x1", "ldmatrix.x2",
                              "ldmatrix.x4", "ldmatrix.x1.trans", "ldmatrix.x2.trans", "ldmatrix.x4.trans",
                              "st.shared.b32", "ld.shared.v4.b32"};
    return (op >= 0 && op <= W_LDS128) ? n[op] : "?";
}

// A stack to run on and the state to resume it.
struct Context {
    ucontext_t uc;          // ucontext switching (CUDA_CPU_UCONTEXT=1 or not x86-64)
    void* sp;               // saved stack pointer (hand-written x86-64 switch)
    char* stack;            // lowest usable address (fibers: a guard page sits below it)
    size_t stack_size;
    void* tsan_fiber;
    void* asan_fake;        // ASan's fake-stack handle while switched away
};

// One pending cp.async (cuda_cpu_ptx.h): performed by the wait_group that completes `group`.
struct CpAsync {
    void* dst;
    const void* src;
    int src_bytes;  // copied from src; the rest of the 16 bytes is zero-filled
    int group;      // index of the group it belongs to (committed or the open one)
};
#define CUDA_CPU_CP_ASYNC_MAX 256  // pending copies per CUDA thread

// A lane's registers / row address for a collective PTX instruction (mma, ldmatrix).
struct PtxSlot {
    uint32_t v[6];
    const void* p;
};

// A cp.async warp-instruction whose copies the warp's lanes are still issuing (bank counting:
// see "shared-memory bank conflicts" below). A warp keeps up to CUDA_CPU_CP_OPEN of them.
struct CpOpen {
    uint64_t key;      // (groups committed << 32) | copies since the last commit, in each lane
    unsigned lanes;    // the lanes that have issued it
    uint32_t off[32];  // their destinations' bank offsets
};
#define CUDA_CPU_CP_OPEN 64
struct CpRing {
    int n;  // open[0, n) in use
    CpOpen open[CUDA_CPU_CP_OPEN];
};

struct Fiber {
    FiberHead head;  // first member: cuda_cpu_cur points here
    int lin;         // linear thread index in the block
    int state;
    int w_op, w_arg, w_width, w_nbytes;  // pending warp op
    unsigned w_mask;
    uint64_t w_val, w_res;
    int ptx_bank;                        // slot bank of this lane's next mma / ldmatrix (0 / 1)
    int cp_head, cp_n, cp_groups;        // pending copies cp[cp_head, cp_n); groups committed
    int cp_seq;                          // copies issued since the last commit (bank counting)
    CpAsync cp[CUDA_CPU_CP_ASYNC_MAX];
    Context ctx;
};

struct Launch {
    const char* name;
    KernelThunk thunk;
    const void* ctx;
    uint3 grid, block;
    size_t smem;
    int nthreads;
    long nblocks;
    CudaCpuSmemStats banks;  // the workers' bank counts, added when each finishes its blocks
};

enum Order { ORDER_FORWARD, ORDER_REVERSE, ORDER_RANDOM };
static int g_order = ORDER_FORWARD;
static uint64_t g_seed = 1;
static int g_nthreads = 1;
static size_t g_stack_size = 256 * 1024;
static int g_verbose = 0;
static int g_timeout_s = 300;
static int g_ucontext = 0;  // 1: switch fibers with swapcontext instead of the x86-64 routine

#if defined(__x86_64__)
// Fiber switch: push the callee-saved registers, save the stack pointer through *save, load
// `to` and pop the other fiber's registers; its return address resumes it. swapcontext does the
// same plus a sigprocmask system call and the FPU environment: ~1 us against ~0.05 us here.
// (Floating-point control state is never changed by kernels, so it need not be switched.)
extern "C" void cuda_cpu_switch(void** save, void* to);
asm(".text\n"
    ".globl cuda_cpu_switch\n"
    ".type cuda_cpu_switch, @function\n"
    "cuda_cpu_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size cuda_cpu_switch, .-cuda_cpu_switch\n");
#define CUDA_CPU_HAVE_ASM_SWITCH 1
#endif

// One per OS thread that runs blocks.
struct Worker {
    // fixed arrays, not std::vector: fibers read them in NOTSAN code, and an out-of-line
    // (instrumented) vector accessor would make TSan see those reads
    Fiber* fibers[1024] = {nullptr};
    int nfibers = 0;
    int order[1024] = {0};
    const void* slots[1024] = {nullptr};  // warp_slot_set / get (WMMA)
    // mma / ldmatrix: two banks, used alternately by each lane, so that a lane may publish its
    // next instruction's registers while slower lanes still read this one's (it cannot get two
    // instructions ahead: the next rendezvous waits for them)
    PtxSlot ptx_slots[2][1024] = {};
    Context sched;  // the OS thread's own stack, where run_block runs
    Launch* L = nullptr;
    long block = 0;
    int nthreads = 0, live = 0, bar_arrived = 0, bar_count = 0;
    uint64_t rng = 0;
    // TSan sync objects (addresses only)
    char bar_sync = 0, block_start_sync = 0, block_end_sync = 0;
    char warp_sync[32] = {0};
    // bank conflicts: this OS thread's counts in the current launch, each warp's open cp.async
    CudaCpuSmemStats banks = {};
    CpRing cp_rings[32] = {};
};
static __thread Worker* tw;

static void fatal_env(const char* msg) { fprintf(stderr, "cuda_cpu: %s\n", msg); exit(2); }

static void init_once() {
    static bool done = false;
    if (done) return;
    done = true;
    const char* o = getenv("CUDA_CPU_ORDER");
    if (o && *o) {
        if (!strcmp(o, "forward")) g_order = ORDER_FORWARD;
        else if (!strcmp(o, "reverse")) g_order = ORDER_REVERSE;
        else if (!strncmp(o, "random", 6)) {
            g_order = ORDER_RANDOM;
            g_seed = (o[6] == ':') ? strtoull(o + 7, nullptr, 10) : 1;
        } else fatal_env("CUDA_CPU_ORDER must be forward, reverse or random:<seed>");
    }
    const char* t = getenv("CUDA_CPU_THREADS");
    if (t && *t) {
        g_nthreads = atoi(t);
        if (g_nthreads < 1 || g_nthreads > 64) fatal_env("CUDA_CPU_THREADS must be 1..64");
    }
    const char* s = getenv("CUDA_CPU_STACK_KB");
#if defined(CUDA_CPU_ASAN) || defined(CUDA_CPU_TSAN)
    g_stack_size = 1024 * 1024;
#endif
    if (s && *s) {
        long kb = atol(s);
        if (kb < 16 || kb > 65536) fatal_env("CUDA_CPU_STACK_KB must be 16..65536");
        g_stack_size = (size_t)kb * 1024;
    }
    const char* u = getenv("CUDA_CPU_UCONTEXT");
    g_ucontext = u && *u && *u != '0';
    const char* v = getenv("CUDA_CPU_VERBOSE");
    g_verbose = v && *v && *v != '0';
    const char* to = getenv("CUDA_CPU_TIMEOUT");
    if (to && *to) {
        g_timeout_s = atoi(to);
        if (g_timeout_s < 0) fatal_env("CUDA_CPU_TIMEOUT must be seconds >= 0 (0: no limit)");
    }
}

// ---------------------------------------------------------------------------------------------
// fiber switching

static void fiber_main();

// Leave `from` (saving its state) for `to`; returns when something switches back to `from`.
// The sanitizers are told about every switch: ASan about the stack it runs on, TSan about the
// fiber (without synchronizing: happens-before comes only from barriers).
NOTSAN static void switch_context(Context* from, Context* to) {
#ifdef CUDA_CPU_ASAN
    __sanitizer_start_switch_fiber(&from->asan_fake, to->stack, to->stack_size);
#endif
#ifdef CUDA_CPU_TSAN
    __tsan_switch_to_fiber(to->tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef CUDA_CPU_HAVE_ASM_SWITCH
    if (!g_ucontext) cuda_cpu_switch(&from->sp, to->sp);
    else
#endif
    swapcontext(&from->uc, &to->uc);
#ifdef CUDA_CPU_ASAN
    __sanitizer_finish_switch_fiber(from->asan_fake, nullptr, nullptr);
#endif
}

NOTSAN static void to_fiber(Worker* w, Fiber* f) {
    cuda_cpu_cur = &f->head;
    switch_context(&w->sched, &f->ctx);
}

NOTSAN static void to_scheduler(Worker* w, Fiber* f) { switch_context(&f->ctx, &w->sched); }

NOTSAN static Fiber* new_fiber(int lin) {
    Fiber* f = new Fiber();
    memset((void*)f, 0, sizeof(Fiber));
    f->lin = lin;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t total = g_stack_size + page;
    void* m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) { perror("cuda_cpu: mmap fiber stack"); abort(); }
    mprotect(m, page, PROT_NONE);  // guard page: a fiber stack overflow faults instead of corrupting
    Context* c = &f->ctx;
    c->stack = (char*)m + page;
    c->stack_size = g_stack_size;
#ifdef CUDA_CPU_HAVE_ASM_SWITCH
    if (!g_ucontext) {
        // initial frame for cuda_cpu_switch: six zero registers (rbp = 0 ends frame-pointer
        // unwinding here), then the return address fiber_main, entered with the stack aligned
        // as after a call; a zero fake return address above it.
        uintptr_t top = ((uintptr_t)c->stack + c->stack_size) & ~(uintptr_t)15;
        void** p = (void**)(top - 16);
        p[1] = nullptr;
        p[0] = (void*)&fiber_main;
        for (int i = 1; i <= 6; i++) p[-i] = nullptr;
        c->sp = (void*)(p - 6);
    } else
#endif
    {
        if (getcontext(&c->uc) != 0) { perror("cuda_cpu: getcontext"); abort(); }
        c->uc.uc_stack.ss_sp = c->stack;
        c->uc.uc_stack.ss_size = c->stack_size;
        c->uc.uc_link = nullptr;
        makecontext(&c->uc, fiber_main, 0);
        // The stack now lives in the saved registers. Forget it in uc_stack: ASan's swapcontext
        // interceptor clears the shadow of uc_stack on every switch into the context (1 MB of
        // stack = 128 KB of shadow per switch, and it would erase the redzones of the suspended
        // frames); the fiber-switch annotations tell ASan about the stacks instead.
        c->uc.uc_stack.ss_sp = nullptr;
        c->uc.uc_stack.ss_size = 0;
    }
#ifdef CUDA_CPU_TSAN
    c->tsan_fiber = __tsan_create_fiber(0);
    char name[32]; snprintf(name, sizeof name, "cuda thread %d", lin);
    __tsan_set_fiber_name(c->tsan_fiber, name);
#endif
    return f;
}

static void free_fiber(Fiber* f) {
#ifdef CUDA_CPU_TSAN
    __tsan_destroy_fiber(f->ctx.tsan_fiber);
#endif
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    munmap(f->ctx.stack - page, f->ctx.stack_size + page);
    delete f;
}

static void free_worker(Worker* w) {
    for (int i = 0; i < w->nfibers; i++) free_fiber(w->fibers[i]);
    delete w;
}

NOTSAN static Worker* get_worker() {
    if (!tw) {
        tw = new Worker();
#ifdef CUDA_CPU_TSAN
        tw->sched.tsan_fiber = __tsan_get_current_fiber();
#endif
    }
    return tw;
}

// ---------------------------------------------------------------------------------------------
// diagnostics

NOTSAN static Fiber* cur_fiber() { return reinterpret_cast<Fiber*>(cuda_cpu_cur); }

[[noreturn]] NOTSAN static void kernel_error(Worker* w, const char* fmt, ...) {
    va_list ap;
    fprintf(stderr, "cuda_cpu: error in kernel %s, block (%u,%u,%u)", w && w->L ? w->L->name : "?",
            cuda_cpu_blockIdx.x, cuda_cpu_blockIdx.y, cuda_cpu_blockIdx.z);
    if (cuda_cpu_cur) fprintf(stderr, ", thread (%u,%u,%u)", cuda_cpu_cur->tid.x, cuda_cpu_cur->tid.y, cuda_cpu_cur->tid.z);
    fprintf(stderr, ": ");
    va_start(ap, fmt); vfprintf(stderr, fmt, ap); va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    abort();
}

void trap(const char* what) { kernel_error(tw, "%s", what); }

[[noreturn]] NOTSAN static void deadlock(Worker* w) {
    fprintf(stderr, "cuda_cpu: DEADLOCK in kernel %s, block (%u,%u,%u): no thread can run.\n"
            "  hint: __syncthreads() must be reached by every live thread; a warp op's mask must name\n"
            "  only lanes that execute the same op with the same mask (or have exited).\n",
            w->L->name, cuda_cpu_blockIdx.x, cuda_cpu_blockIdx.y, cuda_cpu_blockIdx.z);
    int shown = 0;
    for (int i = 0; i < w->nthreads && shown < 64; i++) {
        Fiber* f = w->fibers[i];
        if (f->state == DONE) continue;
        shown++;
        fprintf(stderr, "  thread (%u,%u,%u) warp %d lane %d: waiting in %s", f->head.tid.x, f->head.tid.y,
                f->head.tid.z, i / 32, i % 32, f->state == WARP_WAIT ? op_name(f->w_op) : state_name(f->state));
        if (f->state == WARP_WAIT) fprintf(stderr, " mask 0x%08x", f->w_mask);
        fprintf(stderr, "\n");
    }
    fflush(stderr);
    abort();
}

// ---------------------------------------------------------------------------------------------
// shared-memory bank conflicts (cuda_cpu.h: CudaCpuSmemStats)
//
// What the hardware does (CUDA C++ Programming Guide, "Shared Memory" for compute capability 8.x
// and 9.0; the PTX ISA on ldmatrix): shared memory has 32 banks of 4 bytes, the word at byte
// offset o in bank (o / 4) % 32, so 16 aligned bytes at o fill the 4 banks of bank group
// (o / 16) % 8. An access is served in wavefronts, 16-byte accesses 8 at a time:
//  - ldmatrix reads each 8x8 matrix (8 rows of 16 bytes) in one wavefront if its 8 row addresses
//    fall in 8 different bank groups; rows at the same address are read once (broadcast); else
//    it takes as many wavefronts as the most distinct rows sharing one group (rows 128 bytes
//    apart: 8, so 7 extra);
//  - 16-byte stores and loads (cp.async writes its destination like one) are served in 4 phases
//    of 8 consecutive lanes (0-7, 8-15, ...), each by the same rule;
//  - 4-byte accesses of the 32 lanes take one wavefront if no two distinct words share a bank,
//    else as many as the most distinct words in one bank (one word is read once: broadcast).
// The offset that picks the bank is the shared-window offset: for dynamic shared memory, from
// cuda_cpu_dyn_smem (256-byte aligned, so its banks are the GPU's); a static __shared__ array is
// per-OS-thread storage here, and its own address stands in (the bank from the address modulo
// 128, which follows the harness' alignment of the array, not where nvcc would place it; the low
// 32 bits are kept, so that distinct rows do not pass for one broadcast row).
NOTSAN static uint32_t bank_offset(const void* p) {
    const uintptr_t o = (uintptr_t)p - (uintptr_t)cuda_cpu_dyn_smem;
    return o < CUDA_CPU_DYN_SMEM_MAX ? (uint32_t)o : (uint32_t)(uintptr_t)p;
}

// Wavefronts of the 16-byte accesses at off[i] of the lanes i (< 8) in mask: the most distinct
// addresses in one bank group (0 without a lane).
NOTSAN static int bank_wavefronts(const uint32_t* off, unsigned mask) {
    int per_group[8] = {0}, most = 0;
    for (int i = 0; i < 8; i++) {
        if (!(mask >> i & 1u)) continue;
        bool again = false;   // an earlier lane's address: the same access
        for (int k = 0; k < i; k++) again = again || ((mask >> k & 1u) && off[k] == off[i]);
        if (again) continue;
        const int n = ++per_group[(off[i] >> 4) & 7];
        most = n > most ? n : most;
    }
    return most;
}

// One ldmatrix of a warp, from its lane slots (lanes 8j..8j+7: the rows of matrix j). Counted by
// one lane of the warp.
NOTSAN static void bank_count_ldsm(Worker* w, const PtxSlot* warp, int nmat) {
    uint32_t off[8];
    w->banks.ldsm++;
    w->banks.ldsm_ideal += nmat;
    for (int j = 0; j < nmat; j++) {
        for (int i = 0; i < 8; i++) off[i] = bank_offset(warp[8 * j + i].p);
        w->banks.ldsm_wavefronts += bank_wavefronts(off, 0xffu);
    }
}

// One warp-wide st.shared.b32 (4-byte words at off[0..31]) or ld.shared.v4 (16 bytes each, in
// quarter-warps), from the lane slots of the meeting. Counted by one lane of the warp.
NOTSAN static void bank_count_plain(Worker* w, const PtxSlot* warp, bool v4) {
    uint32_t off[32];
    for (int l = 0; l < 32; l++) off[l] = bank_offset(warp[l].p);
    if (v4) {
        w->banks.ld++;
        w->banks.ld_ideal += 4;
        for (int p = 0; p < 4; p++) w->banks.ld_wavefronts += bank_wavefronts(off + 8 * p, 0xffu);
        return;
    }
    int per_bank[32] = {0}, most = 0;
    for (int l = 0; l < 32; l++) {
        bool again = false;   // an earlier lane's word: the same access
        for (int k = 0; k < l; k++) again = again || (off[k] >> 2) == (off[l] >> 2);
        if (again) continue;
        const int n = ++per_bank[(off[l] >> 2) & 31];
        most = n > most ? n : most;
    }
    w->banks.st++;
    w->banks.st_ideal++;
    w->banks.st_wavefronts += most;
}

// cp.async has no rendezvous: a warp's lanes issue an instruction's copies one after another
// (each lane runs on to its next barrier or warp op). The instruction is known in every lane by
// its place in the lane's own sequence of copies, counted per commit group: lanes that issue the
// same copies do so in the same order, and where some lanes issue a copy that others do not (the
// attention's lse and D rows come from lanes 0-15 of one warp), it is at a group's end, so the
// next group is in step again (a count from the kernel's start would not be).
// An open instruction is counted when all the warp's lanes have issued it; one that only some
// issue, when it is the oldest of a full ring or at block end. So CUDA_CPU_CP_OPEN must exceed
// the copies a lane issues between two points where its warp meets (else an instruction still
// being issued is split in two): the attention kernels issue up to 34 (dK/dV's first load at
// HS 128), and with the partial ones left over from earlier groups, at most 40 are open.
NOTSAN static void cp_account(Worker* w, CpRing* r, int i) {
    const CpOpen* c = &r->open[i];
    w->banks.cp++;
    for (int p = 0; p < 4; p++) {
        const unsigned m = c->lanes >> (8 * p) & 0xffu;
        if (!m) continue;
        w->banks.cp_ideal++;
        w->banks.cp_wavefronts += bank_wavefronts(c->off + 8 * p, m);
    }
    if (i != --r->n) r->open[i] = r->open[r->n];
}

NOTSAN static int cp_open(Worker* w, CpRing* r, uint64_t key) {
    if (r->n == CUDA_CPU_CP_OPEN) {
        int old = 0;
        for (int i = 1; i < r->n; i++) old = r->open[i].key < r->open[old].key ? i : old;
        cp_account(w, r, old);
    }
    r->open[r->n].key = key;
    r->open[r->n].lanes = 0;
    return r->n++;
}

NOTSAN static void bank_note_cp(Worker* w, Fiber* f, const void* dst) {
    const uint64_t key = (uint64_t)f->cp_groups << 32 | (uint32_t)f->cp_seq++;
    const int warp = f->lin / 32, lane = f->lin % 32, nl = w->nthreads - 32 * warp;
    CpRing* r = &w->cp_rings[warp];
    int i = 0;
    while (i < r->n && r->open[i].key != key) i++;
    if (i == r->n) i = cp_open(w, r, key);
    CpOpen* c = &r->open[i];
    c->off[lane] = bank_offset(dst);
    c->lanes |= 1u << lane;
    if (c->lanes == (nl >= 32 ? 0xffffffffu : (1u << nl) - 1)) cp_account(w, r, i);
}

// Block end: the instructions that some lanes never issued are complete.
NOTSAN static void bank_block_end(Worker* w) {
    for (int warp = 0; warp < (w->nthreads + 31) / 32; warp++) {
        CpRing* r = &w->cp_rings[warp];
        while (r->n) cp_account(w, r, r->n - 1);
    }
}

// Relaxed atomics: counters, which order nothing (TSan must not see fibers synchronize here).
NOTSAN static void bank_add(CudaCpuSmemStats* to, const CudaCpuSmemStats& d) {
    __atomic_fetch_add(&to->ldsm, d.ldsm, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->ldsm_ideal, d.ldsm_ideal, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->ldsm_wavefronts, d.ldsm_wavefronts, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->cp, d.cp, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->cp_ideal, d.cp_ideal, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->cp_wavefronts, d.cp_wavefronts, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->st, d.st, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->st_ideal, d.st_ideal, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->st_wavefronts, d.st_wavefronts, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->ld, d.ld, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->ld_ideal, d.ld_ideal, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->ld_wavefronts, d.ld_wavefronts, __ATOMIC_RELAXED);
}

// This OS thread's blocks of the launch are done: its counts go to the launch's.
NOTSAN static void bank_launch_end(Worker* w) {
    if (w->banks.ldsm || w->banks.cp || w->banks.st || w->banks.ld) bank_add(&w->L->banks, w->banks);
    w->banks = CudaCpuSmemStats{};
}

// ---------------------------------------------------------------------------------------------
// barriers and warp rendezvous (called on fiber stacks)

// Every waiting thread gets (number of threads at the barrier << 32) | (number with pred != 0).
NOTSAN static void release_barrier(Worker* w) {
    uint64_t count = 0, n = 0;
    for (int i = 0; i < w->nthreads; i++) {
        Fiber* f = w->fibers[i];
        if (f->state == BAR_WAIT) { count += (f->w_val != 0); n++; }
    }
    for (int i = 0; i < w->nthreads; i++) {
        Fiber* f = w->fibers[i];
        if (f->state == BAR_WAIT) { f->state = RUNNABLE; f->w_res = n << 32 | count; }
    }
    w->bar_arrived = 0;
}

NOTSAN static void bar_arrive(Worker* w, Fiber* f, int pred) {
    f->w_val = (uint64_t)(pred != 0);
    f->state = BAR_WAIT;
    if (++w->bar_arrived == w->live) release_barrier(w);
}

NOTSAN static Worker* check_in_kernel(const char* what) {
    Worker* w = tw;
    if (!w || !w->L || !cuda_cpu_cur) {
        fprintf(stderr, "cuda_cpu: %s called outside a kernel\n", what);
        abort();
    }
    return w;
}

NOTSAN uint64_t syncthreads_vote(int pred) {
    Worker* w = check_in_kernel("__syncthreads");
    Fiber* f = cur_fiber();
#ifdef CUDA_CPU_TSAN
    __tsan_release(&w->bar_sync);
#endif
    bar_arrive(w, f, pred);
    to_scheduler(w, f);
#ifdef CUDA_CPU_TSAN
    __tsan_acquire(&w->bar_sync);
#endif
    return f->w_res;
}

void syncthreads() { (void)syncthreads_vote(0); }

static inline uint64_t poison_bits(int nbytes) {
    return nbytes >= 8 ? ~0ull : ((1ull << (8 * nbytes)) - 1);
}

// If every lane named in `mask` of warp `warp` is waiting in the same warp op with this mask (or
// has exited), compute all their results and make them runnable.
NOTSAN static void try_complete(Worker* w, int warp, unsigned mask, Fiber* who) {
    int base = warp * 32;
    int nl = w->nthreads - base < 32 ? w->nthreads - base : 32;
    Fiber* part[32];
    unsigned pmask = 0;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u)) continue;
        if (l >= nl) continue;  // lane beyond blockDim: treated as exited
        Fiber* g = w->fibers[base + l];
        if (g->state == DONE) continue;
        if (g->state != WARP_WAIT || g->w_mask != mask) return;  // not everybody here yet
        if (g->w_op != who->w_op || g->w_width != who->w_width || g->w_nbytes != who->w_nbytes)
            kernel_error(w, "lanes %d and %d of warp %d meet with mask 0x%08x in different warp ops "
                         "(%s width %d, %s width %d): every lane in the mask must execute the same op",
                         who->lin % 32, l, warp, mask, op_name(who->w_op), who->w_width, op_name(g->w_op), g->w_width);
        part[l] = g;
        pmask |= 1u << l;
    }
    int op = who->w_op, width = who->w_width;
    uint64_t poison = poison_bits(who->w_nbytes);
    uint64_t agg = 0;
    switch (op) {
        case W_BALLOT: for (int l = 0; l < 32; l++) if ((pmask >> l & 1u) && part[l]->w_val) agg |= 1ull << l; break;
        case W_ALL: agg = 1; for (int l = 0; l < 32; l++) if ((pmask >> l & 1u) && !part[l]->w_val) agg = 0; break;
        case W_ANY: agg = 0; for (int l = 0; l < 32; l++) if ((pmask >> l & 1u) && part[l]->w_val) agg = 1; break;
        case W_RED_ADD: { uint32_t a = 0; for (int l = 0; l < 32; l++) if (pmask >> l & 1u) a += (uint32_t)part[l]->w_val; agg = a; break; }
        case W_RED_MIN: { uint32_t a = ~0u; for (int l = 0; l < 32; l++) if (pmask >> l & 1u) a = (uint32_t)part[l]->w_val < a ? (uint32_t)part[l]->w_val : a; agg = a; break; }
        case W_RED_MAX: { uint32_t a = 0; for (int l = 0; l < 32; l++) if (pmask >> l & 1u) a = (uint32_t)part[l]->w_val > a ? (uint32_t)part[l]->w_val : a; agg = a; break; }
        case W_RED_AND: { uint32_t a = ~0u; for (int l = 0; l < 32; l++) if (pmask >> l & 1u) a &= (uint32_t)part[l]->w_val; agg = a; break; }
        case W_RED_OR: { uint32_t a = 0; for (int l = 0; l < 32; l++) if (pmask >> l & 1u) a |= (uint32_t)part[l]->w_val; agg = a; break; }
        case W_RED_XOR: { uint32_t a = 0; for (int l = 0; l < 32; l++) if (pmask >> l & 1u) a ^= (uint32_t)part[l]->w_val; agg = a; break; }
        default: if (op >= W_MMA_16816) agg = pmask; break;  // PTX collectives: who took part
    }
    for (int l = 0; l < 32; l++) {
        if (!(pmask >> l & 1u)) continue;
        Fiber* g = part[l];
        int seg = l & ~(width - 1);
        int src = -1;
        switch (op) {
            case W_SHFL_IDX: src = seg + (g->w_arg & (width - 1)); break;
            case W_SHFL_UP: src = l - g->w_arg; if (src < seg) src = l; break;
            case W_SHFL_DOWN: src = l + g->w_arg; if (src >= seg + width) src = l; break;
            case W_SHFL_XOR: src = l ^ (g->w_arg & 31); if (src >= seg + width) src = l; break;
            default: break;
        }
        if (src >= 0) {
            // reading a lane that does not take part is undefined on the GPU: give poison
            g->w_res = (src < 32 && (pmask >> src & 1u)) ? part[src]->w_val : poison;
        } else if (op == W_MATCH_ANY) {
            unsigned m = 0;
            for (int k = 0; k < 32; k++) if ((pmask >> k & 1u) && part[k]->w_val == g->w_val) m |= 1u << k;
            g->w_res = m;
        } else {
            g->w_res = agg;
        }
        g->state = RUNNABLE;
    }
}

NOTSAN static void warp_arrive(Worker* w, Fiber* f, int op, unsigned mask, uint64_t bits, int nbytes, int arg, int width) {
    int lane = f->lin % 32;
    if (!(mask >> lane & 1u))
        kernel_error(w, "%s with mask 0x%08x that does not include the calling lane %d", op_name(op), mask, lane);
    if (width < 1 || width > 32 || (width & (width - 1)))
        kernel_error(w, "%s width %d is not a power of two in 1..32", op_name(op), width);
    f->w_op = op; f->w_mask = mask; f->w_val = bits; f->w_nbytes = nbytes; f->w_arg = arg; f->w_width = width;
    f->state = WARP_WAIT;
    try_complete(w, f->lin / 32, mask, f);
}

NOTSAN uint64_t warp_op(int op, unsigned mask, uint64_t bits, int nbytes, int arg, int width) {
    Worker* w = check_in_kernel(op_name(op));
    Fiber* f = cur_fiber();
#ifdef CUDA_CPU_TSAN
    // __syncwarp orders memory among the participating lanes; shuffles and votes do not.
    if (op == W_SYNC) __tsan_release(&w->warp_sync[(f->lin / 32) % 32]);
#endif
    warp_arrive(w, f, op, mask, bits, nbytes, arg, width);
    to_scheduler(w, f);
#ifdef CUDA_CPU_TSAN
    if (op == W_SYNC) __tsan_acquire(&w->warp_sync[(f->lin / 32) % 32]);
#endif
    return f->w_res;
}

NOTSAN int lane_id() {
    check_in_kernel("wmma");
    return cur_fiber()->lin % 32;
}
NOTSAN void warp_slot_set(const void* p) {
    Worker* w = check_in_kernel("wmma");
    w->slots[cur_fiber()->lin] = p;
}
NOTSAN const void* warp_slot_get(int lane) {
    Worker* w = check_in_kernel("wmma");
    int i = cur_fiber()->lin / 32 * 32 + lane;
    if (i >= w->nthreads) kernel_error(w, "WMMA needs full warps: lane %d of this warp does not exist", lane);
    return w->slots[i];
}

NOTSAN unsigned activemask() {
    Worker* w = check_in_kernel("__activemask");
    Fiber* f = cur_fiber();
    int base = f->lin / 32 * 32;
    unsigned m = 0;
    for (int l = 0; l < 32 && base + l < w->nthreads; l++)
        if (w->fibers[base + l]->state != DONE) m |= 1u << l;
    return m;
}

NOTSAN static void thread_exit(Worker* w, Fiber* f) {
    // Copies still in flight would land in shared memory at an unknown time after the thread has
    // gone, while the block's other threads may be using that memory for something else.
    if (f->cp_n > f->cp_head)
        kernel_error(w, "the thread exits with %d cp.async copies that no cp.async.wait_group completed "
                     "(ptx_cp_async_commit + ptx_cp_async_wait<0> before returning)", f->cp_n - f->cp_head);
    f->state = DONE;
    w->live--;
    if (w->bar_arrived > 0 && w->bar_arrived == w->live) release_barrier(w);
    // lanes of this warp waiting for this one in a warp op may now be complete
    int base = f->lin / 32 * 32;
    int lane = f->lin % 32;
    for (int l = 0; l < 32 && base + l < w->nthreads; l++) {
        Fiber* g = w->fibers[base + l];
        if (g->state == WARP_WAIT && (g->w_mask >> lane & 1u)) try_complete(w, f->lin / 32, g->w_mask, g);
    }
}

NOTSAN static void fiber_main() {
#ifdef CUDA_CPU_ASAN
    {
        Worker* w0 = tw;
        const void* bottom;
        __sanitizer_finish_switch_fiber(nullptr, &bottom, &w0->sched.stack_size);
        w0->sched.stack = (char*)bottom;
    }
#endif
    for (;;) {
        Worker* w = tw;
        Fiber* f = cur_fiber();
#ifdef CUDA_CPU_TSAN
        __tsan_acquire(&w->block_start_sync);
#endif
        w->L->thunk(w->L->ctx);
#ifdef CUDA_CPU_TSAN
        __tsan_release(&w->block_end_sync);
#endif
        thread_exit(w, f);
        to_scheduler(w, f);
    }
}

// ---------------------------------------------------------------------------------------------
// blocks and launches (scheduler side)

static inline uint64_t splitmix(uint64_t* s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Takes this OS thread's shared memory and fiber stacks back from the blocks that ran on it:
// ordered after them for TSan (blocks that run one after another on one OS thread share these;
// races between blocks are found between OS threads, CUDA_CPU_THREADS=2), and all of the dynamic
// shared memory addressable again for ASan.
NOTSAN static void smem_reclaim(Worker* w) {
#ifdef CUDA_CPU_TSAN
    __tsan_acquire(&w->block_end_sync);
#endif
#ifdef CUDA_CPU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(cuda_cpu_dyn_smem, CUDA_CPU_DYN_SMEM_MAX);
#endif
}

// Dynamic shared memory is garbage at block start on the GPU: poisoned here (0xFF bytes), and
// unaddressable for ASan past the launch's size.
NOTSAN static void smem_block_start(Worker* w, size_t smem) {
    smem_reclaim(w);
    if (smem) memset(cuda_cpu_dyn_smem, 0xFF, smem);
#ifdef CUDA_CPU_ASAN
    size_t used = (smem + 7) & ~(size_t)7;
    if (used < CUDA_CPU_DYN_SMEM_MAX) ASAN_POISON_MEMORY_REGION(cuda_cpu_dyn_smem + used, CUDA_CPU_DYN_SMEM_MAX - used);
#endif
#ifdef CUDA_CPU_TSAN
    __tsan_release(&w->block_start_sync);
#endif
}

NOTSAN static void run_block(Worker* w, long b) {
    Launch* L = w->L;
    int n = L->nthreads;
    while (w->nfibers < n) { w->fibers[w->nfibers] = new_fiber(w->nfibers); w->nfibers++; }
    w->nthreads = n;
    w->block = b;
    uint3 bd = L->block, gd = L->grid;
    cuda_cpu_blockDim = bd;
    cuda_cpu_gridDim = gd;
    cuda_cpu_blockIdx.x = (unsigned)(b % gd.x);
    cuda_cpu_blockIdx.y = (unsigned)((b / gd.x) % gd.y);
    cuda_cpu_blockIdx.z = (unsigned)(b / ((long)gd.x * gd.y));
    for (int i = 0; i < n; i++) {
        Fiber* f = w->fibers[i];
        f->lin = i;
        f->head.tid.x = (unsigned)(i % bd.x);
        f->head.tid.y = (unsigned)((i / bd.x) % bd.y);
        f->head.tid.z = (unsigned)(i / (bd.x * bd.y));
        f->state = RUNNABLE;
        f->ptx_bank = 0;
        f->cp_head = f->cp_n = f->cp_groups = f->cp_seq = 0;
    }
    w->live = n;
    w->bar_arrived = 0;
    smem_block_start(w, L->smem);
    for (int i = 0; i < n; i++) w->order[i] = (g_order == ORDER_REVERSE) ? n - 1 - i : i;
    w->rng = g_seed * 0x9e3779b97f4a7c15ull + (uint64_t)b;
    for (;;) {
        if (g_order == ORDER_RANDOM)
            for (int i = n - 1; i > 0; i--) {
                int j = (int)(splitmix(&w->rng) % (uint64_t)(i + 1));
                int t = w->order[i]; w->order[i] = w->order[j]; w->order[j] = t;
            }
        bool ran = false;
        for (int k = 0; k < n; k++) {
            Fiber* f = w->fibers[w->order[k]];
            if (f->state != RUNNABLE) continue;
            ran = true;
            to_fiber(w, f);
        }
        if (w->live == 0) break;
        if (!ran) deadlock(w);
    }
    bank_block_end(w);
    cuda_cpu_cur = nullptr;
}

// OS thread k of T runs blocks k, k+T, k+2T, ...: neighbouring blocks always run concurrently on
// different OS threads, so TSan sees every race between them that the grid has (a shared work
// counter would let one thread take all blocks of a small grid before the other wakes up).
NOTSAN static void run_blocks(Launch* L, int k, int T) {
    Worker* w = get_worker();
    w->L = L;
    for (long b = k; b < L->nblocks; b += T) run_block(w, b);
    bank_launch_end(w);
    smem_reclaim(w);
    w->L = nullptr;
}

// Worker OS threads (CUDA_CPU_THREADS > 1): persistent, joined at exit.
struct Pool {
    std::mutex mu;
    std::condition_variable cv_work, cv_done;
    std::vector<std::thread> threads;
    Launch* L = nullptr;
    uint64_t gen = 0;
    int busy = 0;
    bool quit = false;
};
static Pool* g_pool;

static void pool_thread(int k) {
    uint64_t seen = 0;
    for (;;) {
        Launch* L;
        {
            std::unique_lock<std::mutex> lk(g_pool->mu);
            g_pool->cv_work.wait(lk, [&] { return g_pool->quit || g_pool->gen != seen; });
            if (g_pool->quit) break;
            seen = g_pool->gen;
            L = g_pool->L;
        }
        run_blocks(L, k, g_nthreads);
        {
            std::lock_guard<std::mutex> lk(g_pool->mu);
            if (--g_pool->busy == 0) g_pool->cv_done.notify_all();
        }
    }
    if (tw) { free_worker(tw); tw = nullptr; }
}

static void at_exit_cleanup();

static void run_launch(Launch* L) {
    if (g_nthreads > 1 && L->nblocks > 1) {
        if (!g_pool) {
            g_pool = new Pool();
            for (int i = 1; i < g_nthreads; i++) g_pool->threads.emplace_back(pool_thread, i);
        }
        {
            std::lock_guard<std::mutex> lk(g_pool->mu);
            g_pool->L = L;
            g_pool->gen++;
            g_pool->busy = (int)g_pool->threads.size();
        }
        g_pool->cv_work.notify_all();
        run_blocks(L, 0, g_nthreads);
        std::unique_lock<std::mutex> lk(g_pool->mu);
        g_pool->cv_done.wait(lk, [] { return g_pool->busy == 0; });
    } else {
        run_blocks(L, 0, 1);
    }
}

// ---------------------------------------------------------------------------------------------
// runtime state: allocations, streams, events, errors

struct Alloc { size_t size; bool host; };
static std::mutex g_mu;
static std::map<uintptr_t, Alloc> g_allocs;
static std::set<const void*> g_streams;
static std::map<const void*, int> g_func_max_smem;
static cudaError_t g_last_error = cudaSuccess;
static bool g_exit_registered = false;

static cudaError_t set_error(cudaError_t e) {
    if (e != cudaSuccess) g_last_error = e;
    return e;
}

static void register_exit() {
    if (!g_exit_registered) { g_exit_registered = true; atexit(at_exit_cleanup); }
}

// ---- host stalls (cuda_cpu.h: CudaCpuSyncCounts)
static std::atomic<long> g_n_d2h{0}, g_n_h2d{0}, g_n_sync{0}, g_n_alloc{0}, g_n_memset{0};
extern "C" CudaCpuSyncCounts cuda_cpu_sync_counts(void) {
    return CudaCpuSyncCounts{g_n_d2h.load(), g_n_h2d.load(), g_n_sync.load(), g_n_alloc.load(), g_n_memset.load()};
}
static void sync_report_at_exit() {
    const char* path = getenv("CUDA_CPU_SYNC_REPORT");
    if (!path || !*path) return;
    FILE* f = fopen(path, "a");
    if (!f) { fprintf(stderr, "cuda_cpu: cannot open CUDA_CPU_SYNC_REPORT file '%s'\n", path); return; }
    CudaCpuSyncCounts c = cuda_cpu_sync_counts();
    fprintf(f, "d2h %ld h2d %ld sync %ld alloc %ld memset %ld\n", c.d2h, c.h2d, c.sync, c.alloc, c.memset);
    fclose(f);
}
static void count_stall(std::atomic<long>& n) {
    static std::once_flag once;
    std::call_once(once, [] { atexit(sync_report_at_exit); });
    n++;
}

// ---- shared-memory bank conflicts (cuda_cpu.h: CudaCpuSmemStats): totals and per kernel name
static std::mutex g_bank_mu;
static CudaCpuSmemStats g_bank_total;
static std::map<std::string, CudaCpuSmemStats> g_bank_kernels;
static void bank_record(const char* kernel, const CudaCpuSmemStats& s) {
    if (!s.ldsm && !s.cp && !s.st && !s.ld) return;
    std::lock_guard<std::mutex> lk(g_bank_mu);
    bank_add(&g_bank_total, s);
    bank_add(&g_bank_kernels[kernel], s);
}
extern "C" void cuda_cpu_smem_stats_reset(void) {
    std::lock_guard<std::mutex> lk(g_bank_mu);
    g_bank_total = CudaCpuSmemStats{};
    g_bank_kernels.clear();
}
extern "C" CudaCpuSmemStats cuda_cpu_smem_stats(const char* kernel) {
    std::lock_guard<std::mutex> lk(g_bank_mu);
    if (!kernel) return g_bank_total;
    auto it = g_bank_kernels.find(kernel);
    return it == g_bank_kernels.end() ? CudaCpuSmemStats{} : it->second;
}

// Is [p, p+n) inside one live device allocation? (n == 0 allowed anywhere inside or at the end)
static bool in_device_alloc(const void* p, size_t n, bool* host_alloc = nullptr) {
    std::lock_guard<std::mutex> lk(g_mu);
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return false;
    --it;
    if (a < it->first || a + n > it->first + it->second.size || (n == 0 && a > it->first + it->second.size)) return false;
    if (host_alloc) *host_alloc = it->second.host;
    return !it->second.host;
}

// Watchdog: a thread that checks once a second how long the current launch has been running.
struct Watchdog {
    std::mutex mu;
    std::condition_variable cv;
    std::thread th;
    bool quit = false;
    std::atomic<double> started{0.0};         // launch start (steady clock s), 0: none running
    std::atomic<const char*> name{nullptr};
};
static Watchdog* g_watchdog;

static double steady_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static void watchdog_thread() {
    std::unique_lock<std::mutex> lk(g_watchdog->mu);
    while (!g_watchdog->quit) {
        g_watchdog->cv.wait_for(lk, std::chrono::milliseconds(250));
        double t0 = g_watchdog->started.load();
        if (t0 > 0.0 && steady_s() - t0 > g_timeout_s) {
            fprintf(stderr, "cuda_cpu: kernel %s has run for more than %d s (CUDA_CPU_TIMEOUT): a thread that "
                    "waits in a loop for memory written by another thread or block never gives up its fiber "
                    "on the harness (threads switch only at barriers and warp intrinsics); if the kernel is "
                    "just slow, raise CUDA_CPU_TIMEOUT\n", g_watchdog->name.load(), g_timeout_s);
            fflush(stderr);
            _exit(124);
        }
    }
}

static void watchdog_begin(const char* name) {
    if (g_timeout_s <= 0) return;
    if (!g_watchdog) {
        g_watchdog = new Watchdog();
        g_watchdog->th = std::thread(watchdog_thread);
    }
    g_watchdog->name.store(name);
    g_watchdog->started.store(steady_s());
}

static void watchdog_end() {
    if (g_watchdog) g_watchdog->started.store(0.0);
}

static void at_exit_cleanup() {
    if (g_watchdog) {
        {
            std::lock_guard<std::mutex> lk(g_watchdog->mu);
            g_watchdog->quit = true;
        }
        g_watchdog->cv.notify_all();
        g_watchdog->th.join();
        delete g_watchdog;
        g_watchdog = nullptr;
    }
    if (g_pool) {
        {
            std::lock_guard<std::mutex> lk(g_pool->mu);
            g_pool->quit = true;
        }
        g_pool->cv_work.notify_all();
        for (auto& t : g_pool->threads) t.join();
        delete g_pool;
        g_pool = nullptr;
    }
    if (tw) { free_worker(tw); tw = nullptr; }
    size_t n = 0, bytes = 0;
    for (auto& kv : g_allocs) { n++; bytes += kv.second.size; }
    if (n) {
        fprintf(stderr, "cuda_cpu: %zu device/pinned allocations (%zu bytes) were never freed "
                "(cudaFree / cudaFreeHost them)\n", n, bytes);
        for (auto& kv : g_allocs) free((void*)kv.first);
        g_allocs.clear();
        fflush(stdout);
        fflush(stderr);
        _exit(1);  // from an atexit handler: exit() may not be called again
    }
}

void launch(const char* name, const void* kernel_id, KernelThunk thunk, const void* ctx,
            dim3 grid, dim3 block, size_t smem, cudaStream_t stream) {
    init_once();
    register_exit();
    // LAUNCH((kernel<T, N>), ...) stringizes the parentheses: report the bare name
    static __thread char namebuf[256];
    size_t nlen = strlen(name);
    if (nlen >= 2 && name[0] == '(' && name[nlen - 1] == ')' && nlen - 2 < sizeof namebuf) {
        memcpy(namebuf, name + 1, nlen - 2);
        namebuf[nlen - 2] = '\0';
        name = namebuf;
    }
    if (tw && tw->L) {
        fprintf(stderr, "cuda_cpu: kernel %s launched from inside kernel %s: dynamic parallelism is not supported\n",
                name, tw->L->name);
        abort();
    }
    long nthreads = (long)block.x * block.y * block.z;
    const char* bad = nullptr;
    cudaError_t err = cudaErrorInvalidConfiguration;
    if (block.x < 1 || block.y < 1 || block.z < 1 || block.x > 1024 || block.y > 1024 || block.z > 64 || nthreads > 1024)
        bad = "block dimensions out of range (at most 1024 threads, z at most 64)";
    else if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        bad = "grid dimensions out of range (x 1..2^31-1, y and z 1..65535)";
    else {
        int maxsmem = 48 * 1024;
        {
            std::lock_guard<std::mutex> lk(g_mu);
            auto it = g_func_max_smem.find(kernel_id);
            if (it != g_func_max_smem.end()) maxsmem = std::max(maxsmem, it->second);
        }
        if (smem > (size_t)maxsmem) {
            bad = "dynamic shared memory above the kernel's limit (48 KB unless raised with "
                  "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))";
            err = cudaErrorInvalidValue;
        } else if (stream) {
            std::lock_guard<std::mutex> lk(g_mu);
            if (!g_streams.count(stream)) { bad = "stream was not created or was destroyed"; err = cudaErrorInvalidResourceHandle; }
        }
    }
    if (bad) {
        fprintf(stderr, "cuda_cpu: launch of %s (grid (%u,%u,%u), block (%u,%u,%u), smem %zu) fails: %s\n", name,
                grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, bad);
        set_error(err);
        return;
    }
    if (g_verbose)
        fprintf(stderr, "cuda_cpu: launch %s (grid (%u,%u,%u), block (%u,%u,%u), smem %zu)\n", name, grid.x, grid.y,
                grid.z, block.x, block.y, block.z, smem);
    Launch L;
    L.name = name; L.thunk = thunk; L.ctx = ctx;
    L.grid = make_uint3(grid.x, grid.y, grid.z);
    L.block = make_uint3(block.x, block.y, block.z);
    L.smem = smem;
    L.nthreads = (int)nthreads;
    L.nblocks = (long)grid.x * grid.y * grid.z;
    L.banks = CudaCpuSmemStats{};
    watchdog_begin(name);
    run_launch(&L);
    watchdog_end();
    bank_record(name, L.banks);
}

// ---------------------------------------------------------------------------------------------
// The PTX instructions behind llmc/cuda/ptx.cuh (cuda_cpu_ptx.h says what is modelled and why).
// Layouts per lane: g = lane >> 2 (groupID), t = lane & 3 (threadID_in_group), as in the table of
// ptx.cuh; "lo" is bits 0-15 of a register.

static inline float bf16_bits_float(uint32_t h) {
    uint32_t x = (h & 0xffffu) << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

// ldmatrix and cp.async name shared memory. The dynamic shared memory buffer is; a cudaMalloc
// allocation is not (the GPU would fault or read garbage through the shared window). Static
// __shared__ arrays and anything else are let through. The allocation table's lock must not
// order the fibers for TSan (it would hide races between them), so TSan is told to ignore it.
NOTSAN static void ptx_check_shared(Worker* w, const char* what, const void* p) {
    if ((const unsigned char*)p >= cuda_cpu_dyn_smem && (const unsigned char*)p < cuda_cpu_dyn_smem + CUDA_CPU_DYN_SMEM_MAX)
        return;
#ifdef CUDA_CPU_TSAN
    AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
#endif
    bool dev = in_device_alloc(p, 1);
#ifdef CUDA_CPU_TSAN
    AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
#endif
    if (dev) kernel_error(w, "%s %p lies in device memory (cudaMalloc): it must be shared memory", what, p);
}

// Publish this lane's part of a collective instruction, meet the warp's other 31 lanes (all must
// come: .aligned) and return the warp's 32 slots of this instruction.
NOTSAN static const PtxSlot* ptx_meet(int op, const uint32_t* v, int nv, const void* p) {
    Worker* w = check_in_kernel(op_name(op));
    Fiber* f = cur_fiber();
    int bank = f->ptx_bank;
    f->ptx_bank ^= 1;
    PtxSlot* mine = &w->ptx_slots[bank][f->lin];
    for (int i = 0; i < nv; i++) mine->v[i] = v[i];
    mine->p = p;
    warp_arrive(w, f, op, 0xffffffffu, 0, 0, 0, 32);
    to_scheduler(w, f);
    unsigned took_part = (unsigned)f->w_res;
    if (took_part != 0xffffffffu)
        kernel_error(w, "%s needs all 32 lanes of the warp; lanes 0x%08x have exited or lie beyond blockDim",
                     op_name(op), ~took_part);
    return &w->ptx_slots[bank][f->lin / 32 * 32];
}

// d = a * b + d. This lane's outputs are rows g, g+8 and columns 2t, 2t+1 of D: it needs rows g
// and g+8 of A (held by the 4 lanes of group g) and columns 2t, 2t+1 of B (held by groups 2t, 2t+1).
// Registers only, no memory: nothing for TSan to see.
NOTSAN void ptx_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    uint32_t regs[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    const PtxSlot* warp = ptx_meet(W_MMA_16816, regs, 6, nullptr);
    int lane = cur_fiber()->lin % 32, g = lane >> 2, t = lane & 3;
    float A[2][16], B[16][2];  // A[h][k]: row g + 8h; B[k][c]: column 2t + c
    for (int tt = 0; tt < 4; tt++)
        for (int r = 0; r < 4; r++) {  // a[r] of lane (g, tt): row g + 8 (r & 1), columns 2tt + 8 (r >> 1) + {0, 1}
            uint32_t v = warp[4 * g + tt].v[r];
            int h = r & 1, k = 2 * tt + 8 * (r >> 1);
            A[h][k] = bf16_bits_float(v);
            A[h][k + 1] = bf16_bits_float(v >> 16);
        }
    for (int c = 0; c < 2; c++)
        for (int tt = 0; tt < 4; tt++)
            for (int r = 0; r < 2; r++) {  // b[r] of lane (2t + c, tt): rows 2tt + 8r + {0, 1}, column 2t + c
                uint32_t v = warp[4 * (2 * t + c) + tt].v[4 + r];
                int k = 2 * tt + 8 * r;
                B[k][c] = bf16_bits_float(v);
                B[k + 1][c] = bf16_bits_float(v >> 16);
            }
    for (int i = 0; i < 4; i++) {  // d[i]: row g + 8 (i >> 1), column 2t + (i & 1); k in order
        float acc = d[i];
        for (int k = 0; k < 16; k++) acc += A[i >> 1][k] * B[k][i & 1];
        d[i] = acc;
    }
}

// The collective part of ldmatrix: check this lane's row address (if its lane supplies one),
// meet the warp, and pick the row addresses this lane's elements come from: rows[j][0..1] of
// matrix j (without .trans row g; with .trans rows 2t and 2t+1).
NOTSAN static void ptx_ldmatrix_rows(const void* row, int nmat, bool trans, const void* rows[4][2]) {
    static const int ops[2][5] = {{0, W_LDSM_X1, W_LDSM_X2, 0, W_LDSM_X4}, {0, W_LDSM_X1_T, W_LDSM_X2_T, 0, W_LDSM_X4_T}};
    Worker* w = check_in_kernel("ldmatrix");
    int lane = cur_fiber()->lin % 32, g = lane >> 2, t = lane & 3;
    if (lane < 8 * nmat) {
        if ((uintptr_t)row & 15)
            kernel_error(w, "ldmatrix: row address %p (lane %d, row %d of matrix %d) is not 16-byte aligned",
                         row, lane, lane & 7, lane >> 3);
        ptx_check_shared(w, "ldmatrix row address", row);
    }
    const PtxSlot* warp = ptx_meet(ops[trans][nmat], nullptr, 0, row);
    if (lane == 0) bank_count_ldsm(w, warp, nmat);
    for (int j = 0; j < nmat; j++) {
        rows[j][0] = warp[8 * j + (trans ? 2 * t : g)].p;
        rows[j][1] = warp[8 * j + (trans ? 2 * t + 1 : g)].p;
    }
}

// Reads the rows in instrumented code, so that TSan checks them against the writers of the tile.
void ptx_ldmatrix(uint32_t* r, const void* smem_row, int nmat, bool trans) {
    if (nmat != 1 && nmat != 2 && nmat != 4) trap("ldmatrix: .x1, .x2 or .x4");
    const void* rows[4][2];
    ptx_ldmatrix_rows(smem_row, nmat, trans, rows);
    int lane = cur_fiber()->lin % 32, g = lane >> 2, t = lane & 3;
    for (int j = 0; j < nmat; j++) {
        uint16_t lo, hi;  // no .trans: row g, columns 2t, 2t+1; .trans: rows 2t, 2t+1, column g
        memcpy(&lo, (const char*)rows[j][0] + (trans ? 2 * g : 4 * t), 2);
        memcpy(&hi, (const char*)rows[j][1] + (trans ? 2 * g : 4 * t + 2), 2);
        r[j] = (uint32_t)lo | (uint32_t)hi << 16;
    }
}

// The collective part of the warp-wide shared store / load: check this lane's address, meet the
// warp, score the banks (one lane). The access itself is the caller's, in instrumented code.
NOTSAN static void ptx_plain_meet(int op, const void* p, unsigned align) {
    Worker* w = check_in_kernel(op_name(op));
    if ((uintptr_t)p & (align - 1))
        kernel_error(w, "%s: address %p (lane %d) is not %u-byte aligned", op_name(op), p, cur_fiber()->lin % 32, align);
    ptx_check_shared(w, op_name(op), p);
    const PtxSlot* warp = ptx_meet(op, nullptr, 0, p);
    if (cur_fiber()->lin % 32 == 0) bank_count_plain(w, warp, op == W_LDS128);
}
void ptx_st_shared_b32(void* smem, uint32_t v) {
    ptx_plain_meet(W_STS32, smem, 4);
    memcpy(smem, &v, 4);
}
void ptx_ld_shared_v4(uint32_t r[4], const void* smem) {
    ptx_plain_meet(W_LDS128, smem, 16);
    memcpy(r, smem, 16);
}

NOTSAN void ptx_cp_async_16(void* smem, const void* gmem, int src_bytes) {
    Worker* w = check_in_kernel("cp.async");
    Fiber* f = cur_fiber();
    if (src_bytes < 0 || src_bytes > 16) kernel_error(w, "cp.async: src_bytes %d is outside 0..16", src_bytes);
    if (((uintptr_t)smem | (uintptr_t)gmem) & 15)
        kernel_error(w, "cp.async: addresses must be 16-byte aligned (shared %p, global %p)", smem, gmem);
    ptx_check_shared(w, "cp.async destination", smem);
    if (f->cp_n == CUDA_CPU_CP_ASYNC_MAX && f->cp_head > 0) {  // move the pending ones to the front
        for (int i = f->cp_head; i < f->cp_n; i++) f->cp[i - f->cp_head] = f->cp[i];
        f->cp_n -= f->cp_head;
        f->cp_head = 0;
    }
    if (f->cp_n == CUDA_CPU_CP_ASYNC_MAX)
        kernel_error(w, "more than %d cp.async copies pending in one thread (cp.async.wait_group completes them)",
                     CUDA_CPU_CP_ASYNC_MAX);
    f->cp[f->cp_n++] = CpAsync{smem, gmem, src_bytes, f->cp_groups};
    bank_note_cp(w, f, smem);
}

NOTSAN void ptx_cp_async_commit() {
    check_in_kernel("cp.async.commit_group");
    cur_fiber()->cp_groups++;  // an empty group is allowed (and trivially complete)
    cur_fiber()->cp_seq = 0;
}

// The oldest pending copy if its group is older than the newest `keep` committed groups.
NOTSAN static bool ptx_cp_async_take(int keep, CpAsync* c) {
    Fiber* f = cur_fiber();
    if (f->cp_head == f->cp_n || f->cp[f->cp_head].group >= f->cp_groups - keep) return false;
    *c = f->cp[f->cp_head++];
    if (f->cp_head == f->cp_n) f->cp_head = f->cp_n = 0;
    return true;
}

// Performs the completed copies now, in the issuing thread, in instrumented code: TSan sees the
// shared-memory writes happen at the wait, so a read by another thread without a __syncthreads
// after it is a reported race.
void ptx_cp_async_wait(int n) {
    Worker* w = check_in_kernel("cp.async.wait_group");
    if (n < 0) kernel_error(w, "cp.async.wait_group %d: N must be >= 0", n);
    CpAsync c;
    while (ptx_cp_async_take(n, &c)) {
        if (c.src_bytes > 0) memcpy(c.dst, c.src, (size_t)c.src_bytes);
        if (c.src_bytes < 16) memset((char*)c.dst + c.src_bytes, 0, (size_t)(16 - c.src_bytes));
    }
}

}  // namespace cuda_cpu

using namespace cuda_cpu;

// ---------------------------------------------------------------------------------------------
// CUDA runtime API (the subset the project uses). Streams are synchronous: work runs at the call.

struct CUstream_st { int id; };
struct CUevent_st { double t; bool recorded; };

// The device's memory: CUDA_CPU_MEM_BYTES (a whole number of bytes) makes a device of that size,
// whose cudaMemGetInfo reports it less what is allocated and whose cudaMalloc fails past it (the
// trainers' out-of-memory check is tested on such a small device); unset, 80 GiB with no limit, of
// which 64 GiB less what is allocated free (so that a test can count what a call allocated).
static size_t g_dev_used;   // bytes of the live device (not pinned host) allocations
static size_t mem_capacity() {
    static size_t cap = (size_t)-1;
    if (cap == (size_t)-1) {
        const char* e = getenv("CUDA_CPU_MEM_BYTES");
        char* end = nullptr;
        cap = e && *e ? (size_t)strtoull(e, &end, 10) : 0;
        if (e && *e && (*end || cap == 0)) fatal_env("CUDA_CPU_MEM_BYTES must be a number of bytes > 0");
    }
    return cap;
}

static cudaError_t alloc_common(void** p, size_t size, bool host) {
    init_once();
    register_exit();
    if (!p) return set_error(cudaErrorInvalidValue);
    *p = nullptr;
    if (size == 0) return cudaSuccess;
    (void)mem_capacity();   // read once, outside the lock
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (!host && mem_capacity() && g_dev_used + size > mem_capacity()) return set_error(cudaErrorMemoryAllocation);
        if (!host) g_dev_used += size;
    }
    void* m = nullptr;
    // exact size (no rounding up), so ASan's redzone starts right after the last valid byte
    if (posix_memalign(&m, 256, size) != 0 || !m) {
        std::lock_guard<std::mutex> lk(g_mu);
        if (!host) g_dev_used -= size;
        return set_error(cudaErrorMemoryAllocation);
    }
    memset(m, 0xFF, size);  // poison: every float / bf16 reads as NaN until written
    std::lock_guard<std::mutex> lk(g_mu);
    g_allocs[(uintptr_t)m] = Alloc{size, host};
    *p = m;
    return cudaSuccess;
}

static cudaError_t free_common(void* p, bool host) {
    if (!p) return cudaSuccess;
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.host != host) {
        fprintf(stderr, "cuda_cpu: %s(%p): not a pointer returned by %s\n", host ? "cudaFreeHost" : "cudaFree",
                p, host ? "cudaMallocHost" : "cudaMalloc");
        return set_error(cudaErrorInvalidValue);
    }
    if (!host) g_dev_used -= it->second.size;
    g_allocs.erase(it);
    free(p);
    return cudaSuccess;
}

// (the stream-ordered cudaMallocAsync / cudaFreeAsync do not stall the host: not counted)
cudaError_t cudaMalloc(void** p, size_t size) { count_stall(g_n_alloc); return alloc_common(p, size, false); }
cudaError_t cudaMallocAsync(void** p, size_t size, cudaStream_t) { return alloc_common(p, size, false); }
cudaError_t cudaMallocManaged(void** p, size_t size, unsigned int) { count_stall(g_n_alloc); return alloc_common(p, size, false); }
cudaError_t cudaFree(void* p) { if (p) count_stall(g_n_sync); return free_common(p, false); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return free_common(p, false); }
cudaError_t cudaMallocHost(void** p, size_t size) { count_stall(g_n_alloc); return alloc_common(p, size, true); }
cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int) { count_stall(g_n_alloc); return alloc_common(p, size, true); }
cudaError_t cudaFreeHost(void* p) { if (p) count_stall(g_n_sync); return free_common(p, true); }

// Check a device-side range: inside one cudaMalloc allocation.
static bool check_dev(const char* fn, const char* which, const void* p, size_t n) {
    if (in_device_alloc(p, n)) return true;
    fprintf(stderr, "cuda_cpu: %s: %s range [%p, +%zu) is not inside one cudaMalloc allocation\n", fn, which, p, n);
    return false;
}
static bool check_host(const char* fn, const char* which, const void* p, size_t n) {
    if (n && in_device_alloc(p, 1)) {
        fprintf(stderr, "cuda_cpu: %s: %s %p is device memory but the copy kind says host\n", fn, which, p);
        return false;
    }
    return true;
}

static cudaError_t memcpy_common(const char* fn, void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    if (n == 0) return cudaSuccess;
    if (!dst || !src) return set_error(cudaErrorInvalidValue);
    bool ok = true;
    switch (kind) {
        case cudaMemcpyHostToDevice: ok = check_dev(fn, "dst", dst, n) && check_host(fn, "src", src, n); break;
        case cudaMemcpyDeviceToHost: ok = check_dev(fn, "src", src, n) && check_host(fn, "dst", dst, n); break;
        case cudaMemcpyDeviceToDevice: ok = check_dev(fn, "dst", dst, n) && check_dev(fn, "src", src, n); break;
        case cudaMemcpyHostToHost: ok = check_host(fn, "dst", dst, n) && check_host(fn, "src", src, n); break;
        case cudaMemcpyDefault:
            if (in_device_alloc(dst, 1)) ok = check_dev(fn, "dst", dst, n);
            if (ok && in_device_alloc(src, 1)) ok = check_dev(fn, "src", src, n);
            break;
        default: ok = false;
    }
    if (!ok) return set_error(cudaErrorInvalidValue);
    memmove(dst, src, n);
    return cudaSuccess;
}

// Is p in pinned host memory (cudaMallocHost)?
static bool is_pinned(const void* p) {
    bool host = false;
    return !in_device_alloc(p, 0, &host) && host;
}
// Count the stall a copy causes on a GPU: a synchronous copy to or from the host always waits;
// an asynchronous one waits when the host side is pageable memory. Device-to-device copies
// do not stall the host.
static void count_copy(const void* dst, const void* src, size_t n, cudaMemcpyKind kind, bool async) {
    if (n == 0) return;
    if (kind == cudaMemcpyDefault) {
        const bool ddev = in_device_alloc(dst, 0), sdev = in_device_alloc(src, 0);
        kind = ddev && sdev ? cudaMemcpyDeviceToDevice : sdev ? cudaMemcpyDeviceToHost
             : ddev ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost;
    }
    if (kind == cudaMemcpyDeviceToHost && (!async || !is_pinned(dst))) count_stall(g_n_d2h);
    if (kind == cudaMemcpyHostToDevice && (!async || !is_pinned(src))) count_stall(g_n_h2d);
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    count_copy(dst, src, n, kind, false);
    return memcpy_common("cudaMemcpy", dst, src, n, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t) {
    count_copy(dst, src, n, kind, true);
    return memcpy_common("cudaMemcpyAsync", dst, src, n, kind);
}
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
    if (width > dpitch || width > spitch) return set_error(cudaErrorInvalidPitchValue);
    count_copy(dst, src, width * height, kind, false);
    for (size_t r = 0; r < height; r++) {
        cudaError_t e = memcpy_common("cudaMemcpy2D", (char*)dst + r * dpitch, (const char*)src + r * spitch, width, kind);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
// __device__ / __constant__ variables are ordinary globals here
cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset, cudaMemcpyKind) {
    if (count) count_stall(g_n_h2d);
    memcpy((char*)symbol + offset, src, count);
    return cudaSuccess;
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset, cudaMemcpyKind) {
    if (count) count_stall(g_n_d2h);
    memcpy(dst, (const char*)symbol + offset, count);
    return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t n) {
    if (n == 0) return cudaSuccess;
    if (!check_dev("cudaMemset", "dst", p, n)) return set_error(cudaErrorInvalidValue);
    count_stall(g_n_memset);
    memset(p, value, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t) { return cudaMemset(p, value, n); }
cudaError_t cudaMemGetInfo(size_t* fr, size_t* total) {
    const size_t cap = mem_capacity();
    std::lock_guard<std::mutex> lk(g_mu);
    const size_t free_default = (size_t)64 << 30;
    if (fr) *fr = cap ? cap - g_dev_used : free_default - (g_dev_used < free_default ? g_dev_used : free_default);
    if (total) *total = cap ? cap : (size_t)80 << 30;
    return cudaSuccess;
}
cudaError_t cudaMemPrefetchAsync(const void*, size_t, struct cudaMemLocation, unsigned int, cudaStream_t) {
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* s) {
    static int next_id = 1;
    if (!s) return set_error(cudaErrorInvalidValue);
    *s = new CUstream_st{next_id++};
    std::lock_guard<std::mutex> lk(g_mu);
    g_streams.insert(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_streams.erase(s)) return set_error(cudaErrorInvalidResourceHandle);
    delete s;
    return cudaSuccess;
}
static cudaError_t check_stream(cudaStream_t s) {
    if (!s) return cudaSuccess;
    std::lock_guard<std::mutex> lk(g_mu);
    return g_streams.count(s) ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { count_stall(g_n_sync); return check_stream(s); }
cudaError_t cudaStreamQuery(cudaStream_t s) { return check_stream(s); }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t, unsigned int) { return check_stream(s); }
cudaError_t cudaDeviceSynchronize(void) { count_stall(g_n_sync); return cudaSuccess; }
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) { return cudaSuccess; }

cudaError_t cudaEventCreate(cudaEvent_t* e) {
    if (!e) return set_error(cudaErrorInvalidValue);
    *e = new CUevent_st{0.0, false};
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e) return set_error(cudaErrorInvalidResourceHandle);
    e->t = steady_s(); e->recorded = true;
    return check_stream(s);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { count_stall(g_n_sync); return e ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle); }
cudaError_t cudaEventQuery(cudaEvent_t e) { return e ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!ms || !a || !b) return set_error(cudaErrorInvalidValue);
    if (!a->recorded || !b->recorded) return set_error(cudaErrorInvalidResourceHandle);
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) { cudaError_t e = g_last_error; g_last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError(void) { return g_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorNotSupported: return "cudaErrorNotSupported";
        default: return "cudaErrorUnknown";
    }
}
const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidPitchValue: return "invalid pitch argument";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorNotSupported: return "operation not supported";
        default: return "unknown error (cuda_cpu harness)";
    }
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > CUDA_CPU_DYN_SMEM_MAX) return set_error(cudaErrorInvalidValue);
        std::lock_guard<std::mutex> lk(g_mu);
        g_func_max_smem[func] = value;
    }
    return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* a, const void* func) {
    if (!a) return set_error(cudaErrorInvalidValue);
    memset(a, 0, sizeof *a);
    a->maxThreadsPerBlock = 1024;
    a->numRegs = 32;
    a->ptxVersion = 90;
    a->binaryVersion = 90;
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_func_max_smem.find(func);
    a->maxDynamicSharedSizeBytes = it != g_func_max_smem.end() ? it->second : 48 * 1024;
    return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void*, int blockSize, size_t smem) {
    if (!n || blockSize <= 0) return set_error(cudaErrorInvalidValue);
    int b = std::min(32, 2048 / blockSize);
    if (smem) b = std::min(b, (int)(233472 / smem));
    *n = std::max(b, 0);
    return cudaSuccess;
}

// A plausible H100 (sm_90): kernels that size themselves from the properties see real numbers.
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* p, int device) {
    if (!p) return set_error(cudaErrorInvalidValue);
    if (device != 0) return set_error(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CUDA-on-CPU harness (emulating sm_90)");
    p->totalGlobalMem = (size_t)80 << 30;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = CUDA_CPU_DYN_SMEM_MAX;
    p->sharedMemPerMultiprocessor = 233472;
    p->regsPerBlock = 65536;
    p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = 9; p->minor = 0;
    p->multiProcessorCount = 132;
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->memoryBusWidth = 5120;
    p->concurrentKernels = 1;
    p->unifiedAddressing = 1;
    p->managedMemory = 1;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (!value) return set_error(cudaErrorInvalidValue);
    if (device != 0) return set_error(cudaErrorInvalidDevice);
    switch (attr) {
        case cudaDevAttrMultiProcessorCount: *value = 132; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = CUDA_CPU_DYN_SMEM_MAX; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = 233472; break;
        case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
        case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
        case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; break;
        case cudaDevAttrWarpSize: *value = 32; break;
        case cudaDevAttrL2CacheSize: *value = 50 * 1024 * 1024; break;
        case cudaDevAttrMaxRegistersPerBlock: *value = 65536; break;
        default: return set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) { if (!d) return set_error(cudaErrorInvalidValue); *d = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice); }
cudaError_t cudaGetDeviceCount(int* n) { if (!n) return set_error(cudaErrorInvalidValue); *n = 1; return cudaSuccess; }
