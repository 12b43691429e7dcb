// fatal() (llmc/base/check.h): exits 1 with the message and the hint, after removing the temporary
// files of every atomic write still open (llmc/base/fileio.h registers that clean-up with
// llmc_on_fatal), so nothing half-written stays behind; clean-ups run once, in order, before the
// fatal hook.
#include "test.h"
#include "test_child.h"
#include "../llmc/base/check.h"
#include "../llmc/base/fileio.h"
#include <unistd.h>

static char g_dir[512];

static void cleanup_a(void) { fprintf(stderr, "cleanup a\n"); }
static void cleanup_b(void) { fprintf(stderr, "cleanup b\n"); }

static void child_fatal_mid_write(void* arg) {
    (void)arg;
    char path[1024];
    AtomicFile a, b;
    snprintf(path, sizeof(path), "%s/one.bin", g_dir);
    fwrite("abc", 1, 3, atomic_open(&a, path));
    snprintf(path, sizeof(path), "%s/two.bin", g_dir);
    fwrite("def", 1, 3, atomic_open(&b, path));
    llmc_on_fatal(cleanup_a);
    llmc_on_fatal(cleanup_b);
    llmc_on_fatal(cleanup_a); // registered twice, runs once
    fatal("a hint", "stopping with %d files half-written", 2);
}

static int count_entries(const char* dir) {
    char cmd[1100], out[64];
    snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
    FILE* p = popen(cmd, "r");
    int n = -1;
    if (p && fgets(out, sizeof(out), p)) n = atoi(out);
    if (p) pclose(p);
    return n;
}

int main(void) {
    const char* b = getenv("BUILD");
    snprintf(g_dir, sizeof(g_dir), "%s/check_test", b && *b ? b : "build");
    mkdir_p(g_dir);
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "rm -f '%s'/*", g_dir);
    if (system(cmd) != 0) return 2;
    const char* want[] = {"error: stopping with 2 files half-written", "hint: a hint", "cleanup a\ncleanup b\n", NULL};
    char out[8192];
    TEST_CHECK(test_expect_fatal("fatal during two atomic writes", child_fatal_mid_write, NULL, want), "fatal output");
    int rc = test_run_child(child_fatal_mid_write, NULL, out, sizeof(out));
    TEST_CHECK(rc == 1, "exit status %d", rc);
    TEST_CHECK(strstr(out, "cleanup a\ncleanup b\n") && !strstr(strstr(out, "cleanup b") + 1, "cleanup a"),
               "clean-ups once each, in order: %s", out);
    int n = count_entries(g_dir);
    TEST_CHECK(n == 0, "%d files left in %s after the fatal error (temporaries not removed)", n, g_dir);
    if (n == 0) printf("ok   no temporary file left behind\n");
    return test_finish("test_check");
}
