// Wall-clock time for step timings and benchmarks: seconds on the monotonic clock (never jumps
// with the system time), as a double.
#ifndef LLMC_TIMER_H
#define LLMC_TIMER_H

#include <time.h>

static inline double timer_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif // LLMC_TIMER_H
