// Minimal test helpers: each test program runs its checks, prints one line per failure with
// file:line, and exits non-zero if any check failed. test/run_tests.sh aggregates programs.
#ifndef LLMC_TEST_H
#define LLMC_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <stdint.h>
#include "../llmc/base/rand.h"

static int test_failures = 0;
static int test_checks = 0;

#define TEST_CHECK(cond, ...) do { test_checks++; if (!(cond)) { test_failures++; \
    fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); } } while (0)

// Compare two float arrays: |a-b| <= atol + rtol*|b| elementwise. Prints the worst element.
static inline int test_allclose(const char* what, const float* a, const float* b, size_t n,
                                double rtol, double atol) {
    size_t worst = 0, bad = 0; double worst_excess = -1.0, maxabs = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double tol = atol + rtol * fabs((double)b[i]);
        if (d > maxabs) maxabs = d;
        // a NaN (an element nothing wrote reads as NaN under the harness and in the GPU op tests)
        // is the worst of all, so the message names it
        const double excess = d != d ? INFINITY : d - tol;
        if (!(d <= tol)) { bad++; if (excess > worst_excess) { worst_excess = excess; worst = i; } }
    }
    test_checks++;
    if (bad) {
        test_failures++;
        fprintf(stderr, "FAIL %s: %zu/%zu elements out of tolerance (rtol %g atol %g); worst [%zu]: got %.9g want %.9g\n",
                what, bad, n, rtol, atol, worst, a[worst], b[worst]);
        return 0;
    }
    printf("ok   %s (%zu elements, max abs diff %.3g)\n", what, n, maxabs);
    return 1;
}

// Reproducible random test inputs: one stream of llmc/base/rand.h's counter-based generator per seed.
typedef struct { uint64_t seed, i; } TestRng;
static inline uint64_t test_rand_u64(TestRng* r) { return rand_u64(r->seed, 0, r->i++); }
static inline double test_rand_uniform(TestRng* r) { return rand_uniform(r->seed, 0, r->i++); } // (0, 1)

// TEST_QUICK=1 in the environment: a test program runs a small subset of its cases, one of each
// kind, for runs where every instruction costs a hundred times more (compute-sanitizer's initcheck
// in scripts/gpu_check.sh). The full set runs everywhere else.
static inline int test_quick(void) {
    const char* q = getenv("TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

// A program's cases as one table (test_ops, test_cuda_ops): each row names its op and runs one
// group of that op's checks; an op may have several rows. A run goes through the selected rows in
// table order, so the full run (every row) draws the same random inputs whatever is selected
// elsewhere. quick marks a row of the TEST_QUICK subset (for programs that have one); what is the
// row's call as text, for a program that times its rows.
typedef struct {
    const char* op;
    void (*run)(void);
    int quick;
    const char* what;
} TestCase;

// Whether row i is the first row of its op (the op names, each once).
static inline int test_case_first(const TestCase* cases, int i) {
    for (int j = 0; j < i; j++) if (strcmp(cases[j].op, cases[i].op) == 0) return 0;
    return 1;
}

// The arguments of a case table program: --op NAME (again for more ops) runs only the rows of
// those ops, --list prints the op names, one a line. value_flags (NULL-terminated, or NULL) are
// the program's own flags, each with a value (--flag VALUE or --flag=VALUE), read elsewhere and
// skipped here. Sets selected[i]
// for each row to run. Returns 0 to run them, 1 after --list, 2 after a message about a bad
// argument or an unknown op (with the list of ops).
static inline int test_cases_select(const char* prog, const TestCase* cases, int n, int argc, char** argv,
                                    const char* const* value_flags, unsigned char* selected) {
    int any_op = 0;
    for (int i = 0; i < n; i++) selected[i] = 0;
    for (int a = 1; a < argc; a++) {
        int own = 0, joined = 0;   // --flag VALUE, --flag=VALUE
        for (int f = 0; value_flags && value_flags[f]; f++) {
            const size_t len = strlen(value_flags[f]);
            own |= strcmp(argv[a], value_flags[f]) == 0;
            joined |= strncmp(argv[a], value_flags[f], len) == 0 && argv[a][len] == '=';
        }
        if (joined) continue;
        if (own && a + 1 < argc) { a++; continue; }
        if (strcmp(argv[a], "--list") == 0) {
            for (int i = 0; i < n; i++) if (test_case_first(cases, i)) printf("%s\n", cases[i].op);
            return 1;
        }
        if (strcmp(argv[a], "--op") != 0 || a + 1 >= argc) {
            fprintf(stderr, "%s: unknown argument '%s' (use: [--op NAME]... | --list)\n", prog, argv[a]);
            return 2;
        }
        const char* op = argv[++a];
        int found = 0;
        for (int i = 0; i < n; i++) if (strcmp(cases[i].op, op) == 0) { selected[i] = 1; found = 1; }
        if (!found) {
            fprintf(stderr, "%s: unknown op '%s'; the ops:", prog, op);
            for (int i = 0; i < n; i++) if (test_case_first(cases, i)) fprintf(stderr, " %s", cases[i].op);
            fprintf(stderr, "\n");
            return 2;
        }
        any_op = 1;
    }
    if (!any_op) for (int i = 0; i < n; i++) selected[i] = 1;
    return 0;
}

static inline int test_finish(const char* name) {
    const char* subset = test_quick() ? " (TEST_QUICK subset)" : "";
    if (test_failures) { fprintf(stderr, "%s%s: %d of %d checks FAILED\n", name, subset, test_failures, test_checks); return 1; }
    printf("%s%s: all %d checks passed\n", name, subset, test_checks);
    return 0;
}

#endif // LLMC_TEST_H
