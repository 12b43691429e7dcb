// JSON reader (llmc/base/json.c): any bytes. A parsed tree is walked with every accessor; a tree that
// parses must also have passed the UTF-8 check, and re-parsing the same bytes gives the same
// shape. The parser never calls fatal(), so LeakSanitizer stays on.
#include "fuzz.h"
#include "base/json.h"

static size_t walk(const JsonValue* v, int depth) {
    size_t n = 1;
    int i32; int64_t i64; uint64_t u64; double d; int b;
    (void)json_as_int(v, &i32); (void)json_as_int64(v, &i64); (void)json_as_uint64(v, &u64);
    (void)json_as_number(v, &d); (void)json_as_bool(v, &b); (void)json_as_string(v); (void)json_is_null(v);
    if (v->type == JSON_STRING && strlen(v->string) > v->string_len) abort(); // NUL-terminated within its length
    if (v->type == JSON_OBJECT) {
        (void)json_find_duplicate_key(v);
        for (int k = 0; k < v->n; k++) if (json_get(v, v->keys[k]) == NULL) abort(); // every key is found
    }
    if (v->type == JSON_ARRAY || v->type == JSON_OBJECT) {
        if (depth > JSON_MAX_DEPTH) abort();
        for (int k = 0; k < v->n; k++) n += walk(&v->items[k], depth + 1);
        if (v->type == JSON_ARRAY && v->n > 0 && json_at(v, v->n - 1) != &v->items[v->n - 1]) abort();
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char err[256];
    JsonValue* v = json_parse((const char*)data, size, err, sizeof(err));
    if (!v) return 0;
    size_t bad;
    if (!json_utf8_valid((const char*)data, size, &bad)) abort(); // accepted invalid UTF-8
    size_t n1 = walk(v, 0);
    JsonValue* again = json_parse((const char*)data, size, err, sizeof(err));
    if (!again || walk(again, 0) != n1) abort();
    json_free(again);
    json_free(v);
    return 0;
}
