// Tokenizer throughput: tinyshakespeare with a cold piece cache, again with a warm one, and a
// ~50 MB file made by repeating it (what preparing a big corpus looks like once common words are
// cached). Single thread; times are thread CPU seconds.
//   make bench-cpu && build/cpu/dev/bench_tokenizer
//   usage: bench_tokenizer [text file [vocab path [repeat MB]]]
#include "text/tokenizer.h"
#include "base/fileio.h"
#include "base/check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../llmc/base/timer.h"

// Thread CPU time, not wall time: the numbers stay meaningful on a busy shared machine.
static double now_s(void) {
    struct timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double run(Tokenizer* t, const char* s, size_t n, size_t* ntok) {
    TokIds v = {0};
    double t0 = timer_now_s();
    tok_encode_append(t, s, n, 0, &v);
    double dt = timer_now_s() - t0;
    *ntok = v.n;
    tokids_free(&v);
    return dt;
}

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "data/tinyshakespeare.txt";
    const char* vocab = argc > 2 ? argv[2] : "data/gpt2";
    double rep_mb = argc > 3 ? atof(argv[3]) : 50.0;
    size_t n;
    char* text = read_file_all(path, &n);
    Tokenizer t;
    double t0 = timer_now_s();
    tok_load(&t, vocab);
    printf("load %s: %.3f s\n", t.source, timer_now_s() - t0);
    size_t ntok;
    double dt = run(&t, text, n, &ntok);
    printf("%s, cold cache: %.2f MB, %zu tokens, %.3f s, %.1f MB/s\n", path, n / 1e6, ntok, dt, n / 1e6 / dt);
    dt = run(&t, text, n, &ntok);
    printf("%s, warm cache: %.2f MB, %zu tokens, %.3f s, %.1f MB/s\n", path, n / 1e6, ntok, dt, n / 1e6 / dt);
    size_t reps = (size_t)(rep_mb * 1e6 / (double)n) + 1;
    char* big = (char*)mallocCheck(reps * n);
    for (size_t r = 0; r < reps; r++) memcpy(big + r * n, text, n);
    tok_free(&t);
    tok_load(&t, vocab); // fresh cache
    dt = run(&t, big, reps * n, &ntok);
    uint64_t hits, misses;
    tok_cache_stats(&t, &hits, &misses);
    printf("%zu x %s: %.1f MB, %zu tokens, %.3f s, %.1f MB/s (cache: %llu hits, %llu misses)\n", reps, path,
           reps * n / 1e6, ntok, dt, reps * n / 1e6 / dt, (unsigned long long)hits, (unsigned long long)misses);
    free(big); free(text);
    tok_free(&t);
    return 0;
}
