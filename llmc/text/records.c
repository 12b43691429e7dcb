#include "text/records.h"
#include "base/check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* REC_SCHEMAS[REC_N_SCHEMA] = { "auto", "text", "prompt-completion", "alpaca", "messages", "sharegpt" };
static const char* REC_FIELDS[RF_N] = { "text", "prompt", "completion", "instruction", "input", "output", "system",
                                        "messages", "role", "content" };
#define REC_HINT "records are {\"text\"}, {\"prompt\", \"completion\"}, alpaca {\"instruction\", \"input\", \"output\"}, " \
                 "{\"messages\": [{\"role\", \"content\"}]} or sharegpt {\"conversations\": [{\"from\", \"value\"}]}; " \
                 "other names: --field, e.g. --field prompt=question,completion=answer (see data/README.md)"

void rec_mapping_init(RecMapping* m) {
    memset(m, 0, sizeof(*m));
    static const char* names[] = { "system", "user", "human", "assistant", "gpt" };
    static const ChatRole roles[] = { CHAT_SYSTEM, CHAT_USER, CHAT_USER, CHAT_ASSISTANT, CHAT_ASSISTANT };
    for (int i = 0; i < 5; i++) {
        snprintf(m->role_name[i], sizeof(m->role_name[i]), "%s", names[i]);
        m->role[i] = roles[i];
    }
    m->n_roles = 5;
}

int rec_schema_parse(const char* name) {
    for (int i = 0; i < REC_N_SCHEMA; i++) if (strcmp(name, REC_SCHEMAS[i]) == 0) return i;
    return -1;
}


int rec_mapping_set_fields(RecMapping* m, char* spec, char* err, size_t errcap) {
    for (char* save = NULL, *item = strtok_r(spec, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char* eq = strchr(item, '=');
        if (!eq || eq == item || !eq[1]) { snprintf(err, errcap, "'%s' is not NAME=KEY", item); return -1; }
        *eq = 0;
        int f = -1;
        for (int i = 0; i < RF_N; i++) if (strcmp(item, REC_FIELDS[i]) == 0) f = i;
        if (f < 0) { snprintf(err, errcap, "unknown field '%s' (fields: %s)", item, REC_FIELD_NAMES); return -1; }
        m->field[f] = eq + 1;
    }
    return 0;
}

int rec_mapping_set_roles(RecMapping* m, const char* spec, char* err, size_t errcap) {
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char* save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char* eq = strchr(item, '=');
        if (!eq || eq == item || !eq[1]) { snprintf(err, errcap, "'%s' is not NAME=ROLE", item); return -1; }
        *eq = 0;
        int role = -1;
        for (int r = 0; r < 3; r++) if (strcmp(eq + 1, chat_role_name((ChatRole)r)) == 0) role = r;
        if (role < 0) { snprintf(err, errcap, "'%s' is not a role: use system, user or assistant", eq + 1); return -1; }
        if (strlen(item) >= sizeof(m->role_name[0])) { snprintf(err, errcap, "role name '%s' is too long", item); return -1; }
        if (m->n_roles == REC_MAX_ROLES) { snprintf(err, errcap, "more than %d role names", REC_MAX_ROLES); return -1; }
        snprintf(m->role_name[m->n_roles], sizeof(m->role_name[0]), "%s", item);
        m->role[m->n_roles++] = (ChatRole)role;
    }
    return 0;
}

// The name of field f in the data under schema s: renamed by --field, else the schema's own.
static const char* rec_key(const RecMapping* m, RecSchema s, RecField f) {
    if (m->field[f]) return m->field[f];
    if (s == REC_SHAREGPT && f == RF_MESSAGES) return "conversations";
    if (s == REC_SHAREGPT && f == RF_ROLE) return "from";
    if (s == REC_SHAREGPT && f == RF_CONTENT) return "value";
    return REC_FIELDS[f];
}

// A string field; optional ones that are absent or null read as "". Fatal otherwise.
static const char* rec_string(const JsonValue* obj, const char* key, int optional, const char* where,
                              const char* what, size_t* len) {
    const JsonValue* v = json_get(obj, key);
    *len = 0;
    if (!v || (optional && json_is_null(v))) {
        if (optional) return "";
        fatal(REC_HINT, "%s: %s has no \"%s\" field", where, what, key);
    }
    const char* s = json_as_string(v);
    if (!s) fatal(REC_HINT, "%s: \"%s\" in %s must be a string, not %s", where, key, what, json_type_name(v->type));
    *len = v->string_len;
    return s;
}

static ChatMessage* rec_push_msg(Record* r, ChatRole role, const char* s, size_t n) {
    if (r->n_msgs == r->msg_cap) {
        r->msg_cap = r->msg_cap ? 2 * r->msg_cap : 16;
        r->msgs = (ChatMessage*)realloc(r->msgs, (size_t)r->msg_cap * sizeof(ChatMessage));
        if (!r->msgs) fatal(NULL, "out of memory");
    }
    ChatMessage* msg = &r->msgs[r->n_msgs++];
    msg->role = role; msg->content = s; msg->content_len = n;
    return msg;
}

static int rec_role(const RecMapping* m, const char* name) {
    for (int i = m->n_roles - 1; i >= 0; i--) // later (--role) entries win
        if (strcmp(m->role_name[i], name) == 0) return (int)m->role[i];
    return -1;
}

static void rec_conversation(const RecMapping* m, RecSchema s, const JsonValue* obj, const char* where, Record* r) {
    const char* lk = rec_key(m, s, RF_MESSAGES);
    const char* rk = rec_key(m, s, RF_ROLE);
    const char* ck = rec_key(m, s, RF_CONTENT);
    const JsonValue* list = json_get(obj, lk);
    if (!list) fatal(REC_HINT, "%s: the record has no \"%s\" field", where, lk);
    if (list->type != JSON_ARRAY || list->n == 0) fatal(REC_HINT, "%s: \"%s\" must be a non-empty array", where, lk);
    for (int k = 0; k < list->n; k++) {
        const JsonValue* el = json_at(list, k);
        char what[64];
        snprintf(what, sizeof(what), "message %d", k);
        if (el->type != JSON_OBJECT) fatal(REC_HINT, "%s: %s is not an object", where, what);
        size_t rl, cl;
        const char* role = rec_string(el, rk, 0, where, what, &rl);
        const char* content = rec_string(el, ck, 0, where, what, &cl);
        int cr = rec_role(m, role);
        if (cr < 0) fatal("roles are system, user (or human) and assistant (or gpt); map others with --role NAME=ROLE",
                          "%s: %s has unknown role '%s'", where, what, role);
        rec_push_msg(r, (ChatRole)cr, content, cl);
    }
}

// Alpaca: [system], user = instruction (+ "\n\n" + input), assistant = output.
static void rec_alpaca(const RecMapping* m, const JsonValue* obj, const char* where, Record* r) {
    size_t ni, nx, no, ns;
    const char* ins = rec_string(obj, rec_key(m, REC_ALPACA, RF_INSTRUCTION), 0, where, "the record", &ni);
    const char* inp = rec_string(obj, rec_key(m, REC_ALPACA, RF_INPUT), 1, where, "the record", &nx);
    const char* out = rec_string(obj, rec_key(m, REC_ALPACA, RF_OUTPUT), 0, where, "the record", &no);
    const char* sys = rec_string(obj, rec_key(m, REC_ALPACA, RF_SYSTEM), 1, where, "the record", &ns);
    if (ns) rec_push_msg(r, CHAT_SYSTEM, sys, ns);
    size_t n = ni + (nx ? 2 + nx : 0);
    if (n + 1 > r->join_cap) {
        r->join_cap = 2 * (n + 1);
        r->join = (char*)realloc(r->join, r->join_cap);
        if (!r->join) fatal(NULL, "out of memory");
    }
    memcpy(r->join, ins, ni);
    if (nx) { memcpy(r->join + ni, "\n\n", 2); memcpy(r->join + ni + 2, inp, nx); }
    r->join[n] = 0;
    rec_push_msg(r, CHAT_USER, r->join, n);
    rec_push_msg(r, CHAT_ASSISTANT, out, no);
}

// Auto-detection: the first schema whose distinguishing field the object has.
static RecSchema rec_detect(const RecMapping* m, const JsonValue* obj, const char* where) {
    if (json_get(obj, rec_key(m, REC_MESSAGES, RF_MESSAGES))) return REC_MESSAGES;
    if (json_get(obj, rec_key(m, REC_SHAREGPT, RF_MESSAGES))) return REC_SHAREGPT;
    if (json_get(obj, rec_key(m, REC_ALPACA, RF_INSTRUCTION))) return REC_ALPACA;
    if (json_get(obj, rec_key(m, REC_PROMPT, RF_PROMPT)) || json_get(obj, rec_key(m, REC_PROMPT, RF_COMPLETION))) return REC_PROMPT;
    if (json_get(obj, rec_key(m, REC_TEXT, RF_TEXT))) return REC_TEXT;
    char have[256] = "";
    for (int i = 0; i < obj->n && strlen(have) < 200; i++) {
        strncat(have, i ? ", \"" : "\"", sizeof(have) - strlen(have) - 1);
        strncat(have, obj->keys[i], sizeof(have) - strlen(have) - 2);
        strncat(have, "\"", sizeof(have) - strlen(have) - 1);
    }
    fatal(REC_HINT, "%s: the object has none of the fields \"%s\", \"%s\", \"%s\", \"%s\"/\"%s\", \"%s\" (it has %s)", where,
          rec_key(m, REC_MESSAGES, RF_MESSAGES), rec_key(m, REC_SHAREGPT, RF_MESSAGES), rec_key(m, REC_ALPACA, RF_INSTRUCTION),
          rec_key(m, REC_PROMPT, RF_PROMPT), rec_key(m, REC_PROMPT, RF_COMPLETION), rec_key(m, REC_TEXT, RF_TEXT),
          obj->n ? have : "no fields");
}

void rec_from_json(const RecMapping* m, const JsonValue* obj, const char* where, Record* r) {
    if (obj->type != JSON_OBJECT) fatal(REC_HINT, "%s: expected a JSON object (a record), got %s", where, json_type_name(obj->type));
    RecSchema s = m->schema == REC_AUTO ? rec_detect(m, obj, where) : m->schema;
    r->schema = s;
    r->n_msgs = 0;
    r->text = r->prompt = r->completion = NULL;
    switch (s) {
    case REC_TEXT:
        r->text = rec_string(obj, rec_key(m, s, RF_TEXT), 0, where, "the record", &r->text_len);
        break;
    case REC_PROMPT:
        r->prompt = rec_string(obj, rec_key(m, s, RF_PROMPT), 0, where, "the record", &r->prompt_len);
        r->completion = rec_string(obj, rec_key(m, s, RF_COMPLETION), 0, where, "the record", &r->completion_len);
        break;
    case REC_ALPACA: rec_alpaca(m, obj, where, r); break;
    case REC_MESSAGES: case REC_SHAREGPT: rec_conversation(m, s, obj, where, r); break;
    default: assertCheck(0);
    }
}

void rec_free(Record* r) {
    free(r->msgs);
    free(r->join);
    memset(r, 0, sizeof(*r));
}
