// The one way to launch a kernel: LAUNCH(kernel, grid, block, smem, stream, args...).
// Under nvcc it is literally the triple-chevron launch of `kernel` with (grid, block, smem, stream)
// and args. Compiled by g++ with the CUDA-on-CPU harness (test/cuda_cpu/cuda_cpu.h force-included),
// it runs the kernel on the CPU, one fiber per CUDA thread. g++ cannot parse the chevrons, so no
// other file may contain them: test/lint_launch.sh fails the build on any raw launch elsewhere.
//
// - grid / block: int or dim3; smem: bytes of dynamic shared memory; stream: 0 or a cudaStream_t.
// - template kernels: put the kernel in parentheses, LAUNCH((my_kernel<float, 4>), ...), because
//   the preprocessor splits macro arguments at the comma of the template argument list.
// - check launch errors afterwards with cudaCheck(cudaGetLastError()) (llmc/cuda/common.cuh).
#ifndef LLMC_CUDA_LAUNCH_CUH
#define LLMC_CUDA_LAUNCH_CUH

#if defined(__CUDACC__)
#define LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__) /* the kernel launch */
#elif defined(CUDA_CPU_HARNESS)
#define LAUNCH(kernel, grid, block, smem, stream, ...) \
    CUDA_CPU_LAUNCH(kernel, grid, block, smem, stream, ##__VA_ARGS__)
#else
#error "llmc/cuda/launch.cuh: compile CUDA sources with nvcc, or with g++ -include test/cuda_cpu/cuda_cpu.h (the CUDA-on-CPU harness)"
#endif

#endif // LLMC_CUDA_LAUNCH_CUH
