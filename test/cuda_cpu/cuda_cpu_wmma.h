// CUDA-on-CPU harness: the WMMA API (nvcuda::wmma, <mma.h>) for warp-level tensor-core tiles.
// Included by cuda_cpu.h. A fragment holds rows*cols/32 elements per lane; which lane holds which
// element is unspecified in CUDA, so kernels may only use the fragment through load / store /
// fill / mma and element-wise operations on x[] (the same for every lane), which work with any
// mapping. Here element e of the row-major tile lives in lane e % 32 at x[e / 32].
// mma_sync gathers the other lanes' A and B elements between two full-warp barriers, so it is a
// rendezvous of all 32 lanes exactly like the hardware instruction (a missing lane deadlocks and
// is reported). Accumulation is fp32 in k order; the GPU's tensor cores differ in rounding.
#ifndef CUDA_CPU_WMMA_H
#define CUDA_CPU_WMMA_H

namespace cuda_cpu {
void warp_slot_set(const void* p);  // publish a pointer for the other lanes of this warp
const void* warp_slot_get(int lane);  // read the pointer lane `lane` of this warp published
int lane_id();
}  // namespace cuda_cpu

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct cuda_cpu_tile;
template <int M, int N, int K> struct cuda_cpu_tile<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct cuda_cpu_tile<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct cuda_cpu_tile<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
public:
    static_assert((M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) || (M == 8 && N == 32 && K == 16),
                  "cuda_cpu WMMA: shapes m16n16k16, m32n8k16, m8n32k16");
    static constexpr int rows = cuda_cpu_tile<Use, M, N, K>::rows;
    static constexpr int cols = cuda_cpu_tile<Use, M, N, K>::cols;
    static constexpr int num_elements = rows * cols / 32;
    typedef T element_type;
    typedef T storage_element_type;
    T x[num_elements];
};

template <typename Use, int M, int N, int K, typename T, typename L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const T& v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}

template <typename F, typename T>
static inline void cuda_cpu_load(F& f, const T* p, unsigned ldm, bool row_major_mem) {
    __syncwarp();  // collective: every lane arrives (and memory written before is visible)
    int lane = cuda_cpu::lane_id();
    for (int i = 0; i < F::num_elements; i++) {
        int e = i * 32 + lane, r = e / F::cols, c = e % F::cols;
        f.x[i] = (typename F::element_type)(row_major_mem ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]);
    }
}

template <int M, int N, int K, typename T, typename U>
static inline void load_matrix_sync(fragment<matrix_a, M, N, K, T, row_major>& f, const U* p, unsigned ldm) { cuda_cpu_load(f, p, ldm, true); }
template <int M, int N, int K, typename T, typename U>
static inline void load_matrix_sync(fragment<matrix_a, M, N, K, T, col_major>& f, const U* p, unsigned ldm) { cuda_cpu_load(f, p, ldm, false); }
template <int M, int N, int K, typename T, typename U>
static inline void load_matrix_sync(fragment<matrix_b, M, N, K, T, row_major>& f, const U* p, unsigned ldm) { cuda_cpu_load(f, p, ldm, true); }
template <int M, int N, int K, typename T, typename U>
static inline void load_matrix_sync(fragment<matrix_b, M, N, K, T, col_major>& f, const U* p, unsigned ldm) { cuda_cpu_load(f, p, ldm, false); }
template <int M, int N, int K, typename T, typename U>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const U* p, unsigned ldm, layout_t l) {
    cuda_cpu_load(f, p, ldm, l == mem_row_major);
}

template <int M, int N, int K, typename T, typename U>
static inline void store_matrix_sync(U* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t l) {
    typedef fragment<accumulator, M, N, K, T> F;
    int lane = cuda_cpu::lane_id();
    for (int i = 0; i < F::num_elements; i++) {
        int e = i * 32 + lane, r = e / F::cols, c = e % F::cols;
        (l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = (U)f.x[i];
    }
    __syncwarp();
}

template <typename T> static inline float cuda_cpu_to_float(T v) { return (float)v; }
static inline float cuda_cpu_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline float cuda_cpu_to_float(__half v) { return __half2float(v); }

// D = A * B + C. Every lane computes its own elements of D from the A and B elements of all lanes.
template <int M, int N, int K, typename TA, typename LA, typename TB, typename LB, typename TC, typename TD>
static inline void mma_sync(fragment<accumulator, M, N, K, TD>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                            const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
                            bool satf = false) {
    typedef fragment<matrix_a, M, N, K, TA, LA> FA;
    typedef fragment<matrix_b, M, N, K, TB, LB> FB;
    typedef fragment<accumulator, M, N, K, TD> FD;
    struct Pub { const FA* a; const FB* b; };
    Pub mine = {&a, &b};
    cuda_cpu::warp_slot_set(&mine);
    __syncwarp();  // every lane has published its fragments
    const Pub* all[32];
    for (int l = 0; l < 32; l++) all[l] = static_cast<const Pub*>(cuda_cpu::warp_slot_get(l));
    int lane = cuda_cpu::lane_id();
    float out[FD::num_elements];
    for (int i = 0; i < FD::num_elements; i++) {
        int e = i * 32 + lane, r = e / N, col = e % N;
        float acc = cuda_cpu_to_float(c.x[i]);
        for (int k = 0; k < K; k++) {
            int ea = r * K + k, eb = k * N + col;  // row-major element index in A (MxK) and B (KxN)
            acc += cuda_cpu_to_float(all[ea % 32]->a->x[ea / 32]) * cuda_cpu_to_float(all[eb % 32]->b->x[eb / 32]);
        }
        if (satf) acc = acc != acc ? 0.0f : (acc < -1.0f ? -1.0f : (acc > 1.0f ? 1.0f : acc));
        out[i] = acc;
    }
    __syncwarp();  // nobody changes its A / B (or D, which may alias C) before all have read them
    for (int i = 0; i < FD::num_elements; i++) d.x[i] = (TD)out[i];
}

}  // namespace wmma
}  // namespace nvcuda

#endif  // CUDA_CPU_WMMA_H
