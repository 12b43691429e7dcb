// CUDA-on-CPU harness: emulation of the warp-level matrix API (nvcuda::wmma, <mma.h>) for the
// shape the project uses: m16n16k16, __nv_bfloat16 (and __half) inputs, float accumulators.
// Included by cuda_cpu.h; test code only. (Under g++ the toolkit's <mma.h> defines nothing, so
// kernels include it unchanged.)
//
// Model:
//  - a fragment holds num_elements = 8 of the 256 elements of its 16x16 tile in each of the 32
//    lanes; lane L holds tile element e = 32 i + L as x[i] (row e / 16, column e % 16). The real
//    mapping is unspecified by CUDA and differs: code may only use x[i] in ways that do not
//    depend on it (scaling, conversion, fill), and a kernel that assumes a mapping gives wrong
//    results here;
//  - load_matrix_sync / store_matrix_sync / mma_sync are warp-collective: each is a warp
//    rendezvous (like a shuffle: it orders nothing for TSan) that every one of the 32 lanes must
//    reach, else the kernel stops with an error. Loads and stores are done by each lane for its
//    own elements (so a missing __syncwarp / __syncthreads before a load shows up as a race);
//    mma_sync exchanges the A and B fragments of the 32 lanes through a per-warp staging area;
//  - the pointer must be 32-byte aligned and ldm a multiple of 16 bytes, as on the GPU.
// Arithmetic: products of bf16/half values are exact in fp32, accumulated in fp32 in k order.
#ifndef CUDA_CPU_WMMA_H
#define CUDA_CPU_WMMA_H

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int m, int n, int k, typename T, typename Layout = void>
struct fragment {
    static_assert(m == 16 && n == 16 && k == 16, "cuda_cpu wmma: only the m16n16k16 shape is emulated");
    static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value ||
                  std::is_same<T, float>::value, "cuda_cpu wmma: element type must be bf16, half or float");
    static_assert(!std::is_same<Use, accumulator>::value || std::is_void<Layout>::value,
                  "cuda_cpu wmma: accumulators take the layout at load/store time");
    static_assert(std::is_same<Use, accumulator>::value || !std::is_void<Layout>::value,
                  "cuda_cpu wmma: matrix_a / matrix_b fragments need row_major or col_major");
    typedef T element_type;
    typedef T storage_element_type;
    enum { num_elements = 8 };
    T x[num_elements];
};

}  // namespace wmma
}  // namespace nvcuda

namespace cuda_cpu {
namespace wmma_emu {

// element i of lane `lane`: tile row and column
static inline int elem_row(int i, int lane) { return (32 * i + lane) / 16; }
static inline int elem_col(int i, int lane) { return (32 * i + lane) % 16; }

static inline int lane_id() { return (int)(cuda_cpu_cur->tid.x + cuda_cpu_blockDim.x *
                                     (cuda_cpu_cur->tid.y + cuda_cpu_blockDim.y * cuda_cpu_cur->tid.z)) % 32; }
static inline int warp_in_block() { return (int)(cuda_cpu_cur->tid.x + cuda_cpu_blockDim.x *
                                           (cuda_cpu_cur->tid.y + cuda_cpu_blockDim.y * cuda_cpu_cur->tid.z)) / 32; }

// Every lane of the warp must be here: a ballot rendezvous (no memory ordering, like on the GPU).
static inline void collective(const char* what) {
    unsigned got = (unsigned)warp_op(W_BALLOT, 0xffffffffu, 1, 4, 0, 32);
    if (got != 0xffffffffu) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: warp-collective, but only lanes 0x%08x of the warp reached it "
                 "(every one of the 32 lanes must call it, none may have exited)", what, got);
        trap(msg);
    }
}

static inline void check_ptr(const void* p, unsigned ldm, size_t esize, const char* what) {
    if (((uintptr_t)p & 31u) != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: pointer %p is not 32-byte aligned (required on the GPU)", what, p);
        trap(msg);
    }
    if ((ldm * esize) % 16 != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: ldm %u is not a multiple of 16 bytes (required on the GPU)", what, ldm);
        trap(msg);
    }
}

// Per-warp staging of the A and B tiles for mma_sync: two buffers used alternately, so a lane
// that has finished one mma_sync can deposit the next one's fragments while slower lanes still
// read the previous ones (no lane can be two mma_syncs ahead: it would have to pass a
// rendezvous that the slow lane has not reached). The accesses are the emulator's own exchange
// of register contents, not kernel memory traffic: invisible to TSan.
struct Stage { float a[256], b[256]; };
inline thread_local Stage cuda_cpu_wmma_stage[32][2];            // [warp in block][parity]
inline thread_local unsigned char cuda_cpu_wmma_parity[32][32];  // [warp][lane]

#ifdef CUDA_CPU_TSAN
#define CUDA_CPU_WMMA_NOTSAN __attribute__((no_sanitize("thread"), noinline))
#else
#define CUDA_CPU_WMMA_NOTSAN
#endif

CUDA_CPU_WMMA_NOTSAN static void stage_put(int warp, int lane, int par, const float* a, const float* b) {
    Stage& s = cuda_cpu_wmma_stage[warp][par];
    for (int i = 0; i < 8; i++) {
        int e = 32 * i + lane;
        s.a[e] = a[i];
        s.b[e] = b[i];
    }
}
// d[i] = c[i] + sum_k A[r][k] B[k][col] for this lane's elements (r, col)
CUDA_CPU_WMMA_NOTSAN static void stage_mma(int warp, int lane, int par, float* d, const float* c) {
    const Stage& s = cuda_cpu_wmma_stage[warp][par];
    for (int i = 0; i < 8; i++) {
        int r = elem_row(i, lane), col = elem_col(i, lane);
        float acc = c[i];
        for (int k = 0; k < 16; k++) acc = fmaf(s.a[r * 16 + k], s.b[k * 16 + col], acc);
        d[i] = acc;
    }
}
CUDA_CPU_WMMA_NOTSAN static int stage_flip(int warp, int lane) {
    int p = cuda_cpu_wmma_parity[warp][lane];
    cuda_cpu_wmma_parity[warp][lane] = (unsigned char)(p ^ 1);
    return p;
}

template <typename T> static inline float to_f(T v) { return (float)v; }
template <> inline float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> inline float to_f<__half>(__half v) { return __half2float(v); }

}  // namespace wmma_emu
}  // namespace cuda_cpu

namespace nvcuda {
namespace wmma {

template <typename Use, typename T, typename L>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, T v) {
    for (int i = 0; i < 8; i++) f.x[i] = v;
}
template <typename Use, typename T, typename L, typename V>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, V v) {
    for (int i = 0; i < 8; i++) f.x[i] = (T)v;
}

// matrix_a (rows m, columns k) / matrix_b (rows k, columns n) from memory in the fragment's layout
template <typename Use, typename T, typename L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "accumulator loads take a layout_t");
    using namespace cuda_cpu::wmma_emu;
    collective("wmma::load_matrix_sync");
    check_ptr(p, ldm, sizeof(T), "wmma::load_matrix_sync");
    int lane = lane_id();
    for (int i = 0; i < 8; i++) {
        int r = elem_row(i, lane), c = elem_col(i, lane);
        f.x[i] = std::is_same<L, row_major>::value ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    }
}

template <typename T>
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* p, unsigned ldm, layout_t layout) {
    using namespace cuda_cpu::wmma_emu;
    collective("wmma::load_matrix_sync");
    check_ptr(p, ldm, sizeof(T), "wmma::load_matrix_sync");
    int lane = lane_id();
    for (int i = 0; i < 8; i++) {
        int r = elem_row(i, lane), c = elem_col(i, lane);
        f.x[i] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    }
}

template <typename T>
static inline void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm, layout_t layout) {
    using namespace cuda_cpu::wmma_emu;
    collective("wmma::store_matrix_sync");
    check_ptr(p, ldm, sizeof(T), "wmma::store_matrix_sync");
    int lane = lane_id();
    for (int i = 0; i < 8; i++) {
        int r = elem_row(i, lane), c = elem_col(i, lane);
        if (layout == mem_row_major) p[(size_t)r * ldm + c] = f.x[i];
        else p[(size_t)c * ldm + r] = f.x[i];
    }
}

// d = a b + c (d may alias c)
template <typename T, typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
                            const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
    using namespace cuda_cpu::wmma_emu;
    static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value,
                  "cuda_cpu wmma: mma_sync inputs must be bf16 or half");
    int lane = lane_id(), warp = warp_in_block();
    if (warp >= 32) cuda_cpu::trap("wmma::mma_sync: more than 32 warps in the block");
    float fa[8], fb[8], fc[8], fd[8];
    for (int i = 0; i < 8; i++) { fa[i] = to_f(a.x[i]); fb[i] = to_f(b.x[i]); fc[i] = c.x[i]; }
    int par = stage_flip(warp, lane);
    stage_put(warp, lane, par, fa, fb);
    collective("wmma::mma_sync");   // every lane's fragments are in the stage now
    stage_mma(warp, lane, par, fd, fc);
    for (int i = 0; i < 8; i++) d.x[i] = fd[i];
}

}  // namespace wmma
}  // namespace nvcuda

#endif  // CUDA_CPU_WMMA_H
