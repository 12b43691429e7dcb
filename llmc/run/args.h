// Command-line flags from a table: long --flags (with short llm.c-style aliases), typed values,
// ranges, and --help generated from the same table. Bad values stop with a message naming the
// flag and what is wrong. The same table reads and writes the values as JSON members (the run
// configuration of a training run is recorded that way, see llmc/run/runconfig.h).
#ifndef LLMC_ARGS_H
#define LLMC_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include "base/json.h"

#ifdef __cplusplus
extern "C" {
#endif

// ARG_OPT_STR: a string from choices whose value may be left out: the flag alone means
// choices[0] ("--resume" = "--resume yes"), and the next word is its value only when it is one of
// the choices ("--resume auto").
// ARG_INT with choices (e.g. {"auto", NULL}): besides an integer in the range, the word choices[0],
// stored as ARG_AUTO (below every range that uses it) and written back as that word (text, JSON).
// ARG_STRS: a string flag that may be given several times, each value kept in order (dst: an
// ArgStrs; the string rules of ARG_STR, choices too).
typedef enum { ARG_INT, ARG_INT64, ARG_FLOAT, ARG_STR, ARG_BOOL, ARG_OPT_STR, ARG_STRS } ArgType;

#define ARG_STRS_MAX 16
typedef struct { const char* v[ARG_STRS_MAX]; int n; } ArgStrs;

typedef struct {
    const char* name;     // "--batch-size"
    const char* alias;    // "-b" or NULL
    ArgType type;
    void* dst;            // int*, int64_t*, float*, const char** (STR, OPT_STR), int* (bool), ArgStrs*
    const char* metavar;  // "N", "PATH" ...
    const char* help;
    double min, max;      // inclusive range for numbers (ignored when min > max); ARG_STR: of the
                          // value's length in bytes (min > max: any non-empty value)
    const char* const* choices; // NULL-terminated list of allowed strings (ARG_STR: or NULL; ARG_OPT_STR;
                          // ARG_INT: the one word it also takes, stored as ARG_AUTO)
} ArgSpec;

#define ARG_AUTO (-1)

// Parse argv against specs. "--help"/"-h" prints usage and exits 0. Both "--flag value" and
// "--flag=value" work; bools take no value ("--merge") or an explicit 0/1/true/false.
// given (n_specs entries, may be NULL) gets 1 for every flag that was on the command line.
void args_parse(int argc, char** argv, const ArgSpec* specs, int n_specs, const char* usage_head,
                unsigned char* given);

// The JSON member name of a flag: the long name without "--", '-' -> '_' ("batch_size").
void args_json_key(const ArgSpec* s, char* out, size_t cap);
// The flag's current value as text for messages: numbers as given (floats in the shortest form
// that reads back), on / off, the string or "none".
void args_value_text(const ArgSpec* s, char* out, size_t cap);
// Write the flag's current value (strings: null when unset) as a member of the open object.
void args_write_json(JsonWriter* w, const ArgSpec* s);
// Set the flag from a JSON value with the same checks as the command line (type, range,
// choices); returns 0, or -1 with a message naming the flag in err.
int args_set_json(const ArgSpec* s, const JsonValue* v, char* err, size_t errcap);

#ifdef __cplusplus
}
#endif
#endif // LLMC_ARGS_H
