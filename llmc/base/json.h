// A small, strict JSON reader (RFC 8259) and a writer for the few JSON files the tool reads and
// writes: safetensors headers, config.json, model.safetensors.index.json, adapter_config.json.
//
// Reader: validates UTF-8 (no overlong forms, no UTF-16 surrogates, nothing past U+10FFFF),
// decodes escapes including \uXXXX surrogate pairs (a lone surrogate is an error), rejects
// control characters inside strings, leading zeros, trailing commas, NaN/Infinity, trailing
// garbage, and nesting deeper than JSON_MAX_DEPTH. Errors carry the byte offset. Duplicate keys
// are kept (RFC 8259 allows them); json_find_duplicate_key() finds them where a format forbids.
// Integer literals are also kept exactly (64-bit) so byte offsets and shapes never round.
#ifndef LLMC_JSON_H
#define LLMC_JSON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JSON_MAX_DEPTH 128

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue JsonValue;
struct JsonValue {
    JsonType type;
    int boolean;         // JSON_BOOL
    double number;       // JSON_NUMBER (nearest double)
    int int_kind;        // JSON_NUMBER: 0 = not an integer literal (or out of 64-bit range),
                         //   1 = non-negative integer (uint_value exact), 2 = negative (int_value exact)
    uint64_t uint_value;
    int64_t int_value;
    char* string;        // JSON_STRING: decoded UTF-8, NUL-terminated (may hold \u0000: use string_len)
    size_t string_len;
    int n;               // JSON_ARRAY / JSON_OBJECT: number of elements / members
    JsonValue* items;    // elements / member values, in document order
    char** keys;         // JSON_OBJECT: member names (decoded, NUL-terminated)
};

// Parse text[0..len). Returns a tree (free with json_free) or NULL with a message in err
// ("invalid JSON at byte 17: expected ':' after object key").
JsonValue* json_parse(const char* text, size_t len, char* err, size_t errcap);
void json_free(JsonValue* v);

// JSON Lines: fn(ctx, line, n, lineno) for every line of text[0..len) that is not blank (only
// spaces, tabs or '\r'), lineno counting from 1 over all lines; returns how many were passed.
typedef void (*JsonlLineFn)(void* ctx, const char* line, size_t n, int lineno);
int jsonl_each_line(const char* text, size_t len, JsonlLineFn fn, void* ctx);

// Checks that s[0..len) is well-formed UTF-8; on failure returns 0 and the offending byte offset.
int json_utf8_valid(const char* s, size_t len, size_t* bad_offset);

// Object member by name (the first one if duplicated), NULL if absent or v is not an object.
const JsonValue* json_get(const JsonValue* obj, const char* key);
// Array element i, NULL if out of range or v is not an array.
const JsonValue* json_at(const JsonValue* arr, int i);
// The first member name that occurs more than once in obj, or NULL.
const char* json_find_duplicate_key(const JsonValue* obj);
const char* json_type_name(JsonType t);

// Typed accessors: return 1 and store the value if v has that type (for ints: an integer literal
// that fits), else 0. All accept v == NULL (returning 0).
int json_as_int(const JsonValue* v, int* out);
int json_as_int64(const JsonValue* v, int64_t* out);
int json_as_uint64(const JsonValue* v, uint64_t* out);
int json_as_number(const JsonValue* v, double* out);
int json_as_bool(const JsonValue* v, int* out);
const char* json_as_string(const JsonValue* v); // NULL if not a string
int json_is_null(const JsonValue* v);

// Writer: appends JSON text to a growable buffer, inserting commas (and, if pretty, newlines and
// two-space indentation) itself. Typical use:
//   JsonWriter w; jw_init(&w, 1); jw_begin_object(&w); jw_key(&w, "r"); jw_int(&w, 8);
//   jw_end_object(&w); atomic_write_file(path, w.buf, w.len); jw_free(&w);
typedef struct {
    char* buf;      // NUL-terminated text so far
    size_t len, cap;
    int pretty;
    int depth;
    int count[JSON_MAX_DEPTH + 1]; // values emitted at each open level
    int after_key;  // a key was just written: the next value follows ": "
} JsonWriter;

void jw_init(JsonWriter* w, int pretty);
void jw_free(JsonWriter* w);
void jw_begin_object(JsonWriter* w);
void jw_end_object(JsonWriter* w);
void jw_begin_array(JsonWriter* w);
void jw_end_array(JsonWriter* w);
void jw_key(JsonWriter* w, const char* key);
void jw_string(JsonWriter* w, const char* s);
// s[0..n): may hold NUL (written as \u0000); must be valid UTF-8 for the JSON to be.
void jw_string_n(JsonWriter* w, const char* s, size_t n);
void jw_int(JsonWriter* w, int64_t v);
void jw_uint(JsonWriter* w, uint64_t v);
// Shortest text that reads back as the same double; always has a '.' or exponent ("2.0",
// "1e-05") so Python reads a float. Fatal for NaN/Inf (not JSON).
void jw_double(JsonWriter* w, double v);
void jw_bool(JsonWriter* w, int v);
void jw_null(JsonWriter* w);
// Raw text appended as is (e.g. padding).
void jw_raw(JsonWriter* w, const char* s, size_t n);

#ifdef __cplusplus
}
#endif
#endif // LLMC_JSON_H
