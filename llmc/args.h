// Command-line flags from a table: long --flags (with short llm.c-style aliases), typed values,
// ranges, and --help generated from the same table. Bad values stop with a message naming the
// flag and what is wrong.
#ifndef LLMC_ARGS_H
#define LLMC_ARGS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ARG_INT, ARG_LONG, ARG_FLOAT, ARG_STR, ARG_BOOL } ArgType;

typedef struct {
    const char* name;     // "--batch-size"
    const char* alias;    // "-b" or NULL
    ArgType type;
    void* dst;            // int*, long*, float*, const char**, int* (bool)
    const char* metavar;  // "N", "PATH" ...
    const char* help;
    double min, max;      // inclusive range for numbers (ignored when min > max)
    const char* const* choices; // NULL-terminated list of allowed strings (ARG_STR), or NULL
} ArgSpec;

// Parse argv against specs. "--help"/"-h" prints usage and exits 0. Both "--flag value" and
// "--flag=value" work; bools take no value ("--merge") or an explicit 0/1/true/false.
void args_parse(int argc, char** argv, const ArgSpec* specs, int n_specs, const char* usage_head);
void args_print_help(const ArgSpec* specs, int n_specs, const char* usage_head);
// Whether the flag was given explicitly on the command line (after args_parse).
int args_given(const char* name);

#ifdef __cplusplus
}
#endif
#endif // LLMC_ARGS_H
