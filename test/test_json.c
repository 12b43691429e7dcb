// JSON reader/writer: RFC 8259 edge cases (accept and reject lists), UTF-8 validation,
// escapes and surrogate pairs, exact integers, depth limit, duplicate-key helper, and a
// writer -> reader round trip. Python's json module produced the escaped strings of
// test/ref/hf_formats/st_py_expect.json, which test_safetensors.c also reads through this parser.
#include "test.h"
#include "base/json.h"
#include <stdint.h>

static JsonValue* parse(const char* s) {
    char err[256];
    JsonValue* v = json_parse(s, strlen(s), err, sizeof(err));
    return v;
}

static void expect_reject(const char* text, size_t len, const char* want_in_msg) {
    char err[256];
    JsonValue* v = json_parse(text, len, err, sizeof(err));
    TEST_CHECK(v == NULL, "accepted invalid JSON %.*s", (int)len, text);
    if (v) { json_free(v); return; }
    TEST_CHECK(strstr(err, want_in_msg) != NULL, "message for %.*s is '%s', wanted '%s'", (int)len, text, err, want_in_msg);
}

static void expect_accept(const char* text) {
    char err[256];
    JsonValue* v = json_parse(text, strlen(text), err, sizeof(err));
    TEST_CHECK(v != NULL, "rejected valid JSON %s: %s", text, err);
    json_free(v);
}

int main(void) {
    // --- accepted documents
    const char* good[] = {
        "0", "-0", "1.5e+10", "-1E-3", "true", "false", "null", "\"\"", "[]", "{}", " \t\r\n[ 1 , 2 ] \n",
        "{\"a\":{\"b\":[1,{\"c\":null}]}}", "\"\\u0000\"", "\"\\ud83d\\ude00\"", "\"caf\xc3\xa9\"",
        "\"\xf4\x8f\xbf\xbf\"", "123456789012345678901234567890",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) expect_accept(good[i]);

    // --- rejected documents and the rule each message names
    struct { const char* text; const char* msg; } bad[] = {
        {"", "unexpected end"}, {"[1,]", "unexpected character ']'"}, {"{\"a\":1,}", "expected a string key"},
        {"01", "leading zero"}, {"1.", "digit after '.'"}, {"1e", "digit in exponent"}, {"-", "invalid number"},
        {"NaN", "unexpected character"}, {"Infinity", "unexpected character"}, {"[1 2]", "expected ',' or ']'"},
        {"{\"a\" 1}", "expected ':'"}, {"{1:2}", "expected a string key"}, {"\"abc", "unterminated string"},
        {"\"a\tb\"", "control character"}, {"\"\\x\"", "invalid escape"}, {"\"\\u12G4\"", "invalid hex digit"},
        {"\"\\ud800\"", "not followed by a low surrogate"}, {"\"\\udc00\"", "lone low surrogate"},
        {"\"\\ud800\\u0041\"", "not a low surrogate"}, {"[1] x", "unexpected data after"}, {"tru", "unexpected character 't'"},
        {"\"\xc0\xaf\"", "invalid UTF-8"},       // overlong '/'
        {"\"\xed\xa0\x80\"", "invalid UTF-8"},   // UTF-8-encoded surrogate
        {"\"\xf4\x90\x80\x80\"", "invalid UTF-8"}, // above U+10FFFF
        {"\"\xe2\x82\"", "invalid UTF-8"},       // truncated sequence
        {"\xff", "invalid UTF-8"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) expect_reject(bad[i].text, strlen(bad[i].text), bad[i].msg);
    expect_reject("[1]\0", 4, "unexpected"); // an embedded NUL is not whitespace

    // --- depth limit: JSON_MAX_DEPTH nested arrays parse, one more does not
    {
        char buf[2 * (JSON_MAX_DEPTH + 1) + 1];
        for (int depth = JSON_MAX_DEPTH; depth <= JSON_MAX_DEPTH + 1; depth++) {
            memset(buf, '[', (size_t)depth); memset(buf + depth, ']', (size_t)depth); buf[2 * depth] = '\0';
            JsonValue* v = parse(buf);
            if (depth == JSON_MAX_DEPTH) TEST_CHECK(v != NULL, "depth %d rejected", depth);
            else TEST_CHECK(v == NULL, "depth %d accepted", depth);
            json_free(v);
        }
        expect_reject(buf, strlen(buf), "nesting deeper");
    }

    // --- values
    {
        JsonValue* v = parse("{\"i\": 9007199254740993, \"u\": 18446744073709551615, \"big\": 18446744073709551616,"
                             " \"neg\": -9223372036854775808, \"f\": 2.5, \"e\": 1e2, \"s\": \"a\\\"b\\\\c\\/d\\n\\u00e9\\ud83d\\ude00\","
                             " \"t\": true, \"n\": null, \"arr\": [10, 20, 30], \"nul\": \"x\\u0000y\"}");
        TEST_CHECK(v != NULL, "parse failed");
        if (v) {
            int64_t i64; uint64_t u64; int i; double d; int b;
            TEST_CHECK(json_as_int64(json_get(v, "i"), &i64) && i64 == 9007199254740993LL, "exact int64 beyond 2^53");
            TEST_CHECK(json_as_uint64(json_get(v, "u"), &u64) && u64 == UINT64_MAX, "uint64 max");
            TEST_CHECK(!json_as_int64(json_get(v, "u"), &i64), "uint64 max is not an int64");
            TEST_CHECK(!json_as_uint64(json_get(v, "big"), &u64) && json_as_number(json_get(v, "big"), &d) && d == 18446744073709551616.0,
                       "2^64 is a number but no integer");
            TEST_CHECK(json_as_int64(json_get(v, "neg"), &i64) && i64 == INT64_MIN, "int64 min");
            TEST_CHECK(!json_as_uint64(json_get(v, "neg"), &u64), "negative is not uint64");
            TEST_CHECK(!json_as_int(json_get(v, "i"), &i), "too large for int");
            TEST_CHECK(!json_as_int(json_get(v, "f"), &i) && json_as_number(json_get(v, "f"), &d) && d == 2.5, "2.5");
            TEST_CHECK(!json_as_int(json_get(v, "e"), &i) && json_as_number(json_get(v, "e"), &d) && d == 100.0, "1e2 is a float literal");
            TEST_CHECK(strcmp(json_as_string(json_get(v, "s")), "a\"b\\c/d\n\xc3\xa9\xf0\x9f\x98\x80") == 0, "escapes decoded");
            TEST_CHECK(json_as_bool(json_get(v, "t"), &b) && b == 1, "true");
            TEST_CHECK(json_is_null(json_get(v, "n")), "null");
            TEST_CHECK(json_get(v, "missing") == NULL && json_as_string(json_get(v, "missing")) == NULL, "missing key");
            const JsonValue* arr = json_get(v, "arr");
            TEST_CHECK(arr && arr->n == 3 && json_as_int(json_at(arr, 2), &i) && i == 30 && json_at(arr, 3) == NULL, "array access");
            const JsonValue* nul = json_get(v, "nul");
            TEST_CHECK(nul && nul->string_len == 3 && nul->string[1] == '\0' && nul->string[2] == 'y', "embedded NUL kept");
            TEST_CHECK(json_find_duplicate_key(v) == NULL, "no duplicates");
        }
        json_free(v);
        v = parse("{\"b\":1,\"a\":2,\"c\":3,\"a\":4}");
        TEST_CHECK(v && json_find_duplicate_key(v) && strcmp(json_find_duplicate_key(v), "a") == 0, "duplicate 'a' found");
        int i;
        TEST_CHECK(v && json_as_int(json_get(v, "a"), &i) && i == 2, "json_get returns the first of duplicates");
        json_free(v);
    }

    // --- writer round trip (compact and pretty)
    for (int pretty = 0; pretty <= 1; pretty++) {
        JsonWriter w;
        jw_init(&w, pretty);
        jw_begin_object(&w);
        jw_key(&w, "str"); jw_string(&w, "q\"uote\\ new\nline tab\t ctl\x01 \xc3\xa9");
        jw_key(&w, "eps"); jw_double(&w, 1e-5);
        jw_key(&w, "tenth"); jw_double(&w, 0.1);
        jw_key(&w, "two"); jw_double(&w, 2.0);
        jw_key(&w, "third"); jw_double(&w, 1.0 / 3.0);
        jw_key(&w, "neg"); jw_int(&w, -42);
        jw_key(&w, "u"); jw_uint(&w, UINT64_MAX);
        jw_key(&w, "list"); jw_begin_array(&w); jw_bool(&w, 1); jw_null(&w); jw_begin_object(&w); jw_end_object(&w); jw_end_array(&w);
        jw_key(&w, "empty"); jw_begin_array(&w); jw_end_array(&w);
        jw_end_object(&w);
        char err[256];
        JsonValue* v = json_parse(w.buf, w.len, err, sizeof(err));
        TEST_CHECK(v != NULL, "writer output does not parse (%s): %s", err, w.buf);
        if (v) {
            double d; int64_t i64; uint64_t u64;
            TEST_CHECK(strcmp(json_as_string(json_get(v, "str")), "q\"uote\\ new\nline tab\t ctl\x01 \xc3\xa9") == 0, "string round trip");
            TEST_CHECK(json_as_number(json_get(v, "eps"), &d) && d == 1e-5, "1e-5");
            TEST_CHECK(json_as_number(json_get(v, "third"), &d) && d == 1.0 / 3.0, "1/3 round trip");
            TEST_CHECK(json_get(v, "two")->int_kind == 0, "2.0 written as a float literal");
            TEST_CHECK(json_as_int64(json_get(v, "neg"), &i64) && i64 == -42, "-42");
            TEST_CHECK(json_as_uint64(json_get(v, "u"), &u64) && u64 == UINT64_MAX, "uint64 max");
            TEST_CHECK(json_get(v, "list")->n == 3 && json_get(v, "empty")->n == 0, "arrays");
        }
        TEST_CHECK(strstr(w.buf, "\"tenth\":") && strstr(w.buf, "0.1") && strstr(w.buf, "1e-05") && strstr(w.buf, "2.0"),
                   "shortest number text: %s", w.buf);
        if (!pretty) TEST_CHECK(strchr(w.buf, '\n') == NULL, "compact output has no newline");
        json_free(v);
        jw_free(&w);
    }
    return test_finish("test_json");
}
