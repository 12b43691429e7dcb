// The result lines of the kernel programs in dev/cuda/: one line per program start, per check
// against the CPU reference and per timing, aligned for people and split on " | " by
// scripts/gpu_report.py (the GPU check's report):
//
//   prog  <program> | <device> | <shape>
//   check <program> | <what> | err <max error relative to max |ref|> | tol <tolerance> | ok   (or MISMATCH)
//   time  <program> | <what> | <ms> ms | <GB/s> GB/s | <TFLOP/s> TFLOP/s               (a rate not measured: -)
//
// GB/s counts the bytes the op must move at least once; TFLOP/s the useful FLOPs. The device's
// peaks are not printed here: the report divides by them (scripts/gpu_check.sh's env section).
#ifndef DEV_CUDA_REPORT_CUH
#define DEV_CUDA_REPORT_CUH

#include <stdarg.h>
#include <stdio.h>

static const char* report_prog = "?";

// first line of a program: its name (used by every later line), the device, the shape
static inline void report_begin(const char* prog, const char* device, const char* shape_fmt, ...) {
    report_prog = prog;
    char shape[256];
    va_list ap;
    va_start(ap, shape_fmt);
    vsnprintf(shape, sizeof(shape), shape_fmt, ap);
    va_end(ap);
    printf("prog  %s | %s | %s\n", prog, device, shape);
}

static inline void report_check(const char* what, double err, double tol, bool ok) {
    printf("check %s | %-40s | err %.3g | tol %.1g | %s\n", report_prog, what, err, tol, ok ? "ok" : "MISMATCH");
}

// milliseconds per call, and the rates of `bytes` / `flops` per call (<= 0: not reported)
static inline void report_time(const char* what, double ms, double bytes, double flops) {
    char gbs[32] = "-", tfs[32] = "-";
    if (bytes > 0) snprintf(gbs, sizeof(gbs), "%.1f", bytes / (ms * 1e-3) / 1e9);
    if (flops > 0) snprintf(tfs, sizeof(tfs), "%.2f", flops / (ms * 1e-3) / 1e12);
    printf("time  %s | %-40s | %.4f ms | %s GB/s | %s TFLOP/s\n", report_prog, what, ms, gbs, tfs);
}

#endif // DEV_CUDA_REPORT_CUH
