#include "args.h"
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>

#define MAX_GIVEN 256
static const char* g_given[MAX_GIVEN];
static int g_n_given = 0;

int args_given(const char* name) {
    for (int i = 0; i < g_n_given; i++) if (strcmp(g_given[i], name) == 0) return 1;
    return 0;
}

void args_print_help(const ArgSpec* specs, int n, const char* usage_head) {
    printf("%s\n\nOptions:\n", usage_head);
    for (int i = 0; i < n; i++) {
        const ArgSpec* s = &specs[i];
        char left[96];
        snprintf(left, sizeof(left), "  %s%s%s%s%s", s->alias ? s->alias : "", s->alias ? ", " : "", s->name,
                 s->type == ARG_BOOL ? "" : " ", s->type == ARG_BOOL ? "" : (s->metavar ? s->metavar : "X"));
        printf("%-34s %s", left, s->help);
        switch (s->type) {
        case ARG_INT: printf(" (default %d)", *(int*)s->dst); break;
        case ARG_LONG: printf(" (default %ld)", *(long*)s->dst); break;
        case ARG_FLOAT: printf(" (default %g)", *(float*)s->dst); break;
        case ARG_STR: if (*(const char**)s->dst) printf(" (default %s)", *(const char**)s->dst); break;
        case ARG_BOOL: break;
        }
        if (s->choices) {
            printf(" [");
            for (int c = 0; s->choices[c]; c++) printf("%s%s", c ? "|" : "", s->choices[c]);
            printf("]");
        }
        printf("\n");
    }
    printf("  %-32s show this help\n", "-h, --help");
}

static const char* HINT = "run with --help to see every flag and its range";

static void set_value(const ArgSpec* s, const char* val) {
    char* end = NULL;
    errno = 0;
    switch (s->type) {
    case ARG_INT: case ARG_LONG: {
        long long v = strtoll(val, &end, 10);
        if (end == val || *end || errno) fatal(HINT, "%s: '%s' is not an integer", s->name, val);
        if (s->min <= s->max && (v < s->min || v > s->max))
            fatal(HINT, "%s: %lld is out of range [%.0f, %.0f]", s->name, v, s->min, s->max);
        if (s->type == ARG_INT) {
            if (v < -2147483647LL || v > 2147483647LL) fatal(HINT, "%s: %lld is too large", s->name, v);
            *(int*)s->dst = (int)v;
        } else *(long*)s->dst = (long)v;
        break;
    }
    case ARG_FLOAT: {
        double v = strtod(val, &end);
        if (end == val || *end || errno || !isfinite(v)) fatal(HINT, "%s: '%s' is not a finite number", s->name, val);
        if (s->min <= s->max && (v < s->min || v > s->max))
            fatal(HINT, "%s: %g is out of range [%g, %g]", s->name, v, s->min, s->max);
        *(float*)s->dst = (float)v;
        break;
    }
    case ARG_STR:
        if (s->choices) {
            int ok = 0;
            for (int c = 0; s->choices[c]; c++) if (strcmp(s->choices[c], val) == 0) ok = 1;
            if (!ok) {
                char buf[512] = {0};
                for (int c = 0; s->choices[c]; c++) {
                    strncat(buf, c ? ", " : "", sizeof(buf) - strlen(buf) - 1);
                    strncat(buf, s->choices[c], sizeof(buf) - strlen(buf) - 1);
                }
                fatal(HINT, "%s: '%s' is not one of: %s", s->name, val, buf);
            }
        }
        if (!val[0]) fatal(HINT, "%s: empty value", s->name);
        *(const char**)s->dst = val;
        break;
    case ARG_BOOL:
        if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "yes")) *(int*)s->dst = 1;
        else if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "no")) *(int*)s->dst = 0;
        else fatal(HINT, "%s: '%s' is not a boolean (use 0/1, true/false)", s->name, val);
        break;
    }
}

void args_parse(int argc, char** argv, const ArgSpec* specs, int n, const char* usage_head) {
    g_n_given = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { args_print_help(specs, n, usage_head); exit(0); }
        if (a[0] != '-') fatal(HINT, "unexpected argument '%s' (flags start with --)", a);
        const char* eq = strchr(a, '=');
        size_t keylen = eq ? (size_t)(eq - a) : strlen(a);
        const ArgSpec* s = NULL;
        for (int k = 0; k < n && !s; k++) {
            if ((strlen(specs[k].name) == keylen && !strncmp(specs[k].name, a, keylen)) ||
                (specs[k].alias && strlen(specs[k].alias) == keylen && !strncmp(specs[k].alias, a, keylen)))
                s = &specs[k];
        }
        if (!s) fatal(HINT, "unknown flag '%.*s'", (int)keylen, a);
        const char* val;
        if (eq) val = eq + 1;
        else if (s->type == ARG_BOOL) {
            // a bool takes an explicit value only when the next word is one
            if (i + 1 < argc && (!strcmp(argv[i + 1], "0") || !strcmp(argv[i + 1], "1") ||
                                 !strcmp(argv[i + 1], "true") || !strcmp(argv[i + 1], "false"))) val = argv[++i];
            else val = "1";
        } else {
            if (i + 1 >= argc) fatal(HINT, "%s needs a value (%s)", s->name, s->metavar ? s->metavar : "X");
            val = argv[++i];
        }
        set_value(s, val);
        if (g_n_given < MAX_GIVEN) g_given[g_n_given++] = s->name;
    }
}
