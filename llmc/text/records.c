#include "text/records.h"
#include "base/check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* REC_SCHEMAS[REC_N_SCHEMA] = { "auto", "text", "prompt-completion", "alpaca", "messages", "sharegpt",
                                                 "preference" };
static const char* REC_FIELDS[RF_N] = { "text", "prompt", "completion", "instruction", "input", "output", "system",
                                        "messages", "role", "content", "chosen", "rejected" };
#define REC_HINT "records are {\"text\"}, {\"prompt\", \"completion\"}, alpaca {\"instruction\", \"input\", \"output\"}, " \
                 "{\"messages\": [{\"role\", \"content\"}]}, sharegpt {\"conversations\": [{\"from\", \"value\"}]} or preference " \
                 "pairs {\"prompt\", \"chosen\", \"rejected\"}; " \
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

// The messages of a JSON array: appended to r->msgs. Returns how many. lk: the list's name in
// messages (NULL: the record's one conversation).
static int rec_messages(const RecMapping* m, RecSchema s, const JsonValue* list, const char* lk, const char* where, Record* r) {
    const char* rk = rec_key(m, s, RF_ROLE);
    const char* ck = rec_key(m, s, RF_CONTENT);
    for (int k = 0; k < list->n; k++) {
        const JsonValue* el = json_at(list, k);
        char what[160];
        if (lk) snprintf(what, sizeof(what), "message %d of \"%s\"", k, lk);
        else snprintf(what, sizeof(what), "message %d", k);
        if (el->type != JSON_OBJECT) fatal(REC_HINT, "%s: %s is not an object", where, what);
        size_t rl, cl;
        const char* role = rec_string(el, rk, 0, where, what, &rl);
        const char* content = rec_string(el, ck, 0, where, what, &cl);
        int cr = rec_role(m, role);
        if (cr < 0) fatal("roles are system, user (or human) and assistant (or gpt); map others with --role NAME=ROLE",
                          "%s: %s has unknown role '%s'", where, what, role);
        rec_push_msg(r, (ChatRole)cr, content, cl);
    }
    return list->n;
}

static void rec_conversation(const RecMapping* m, RecSchema s, const JsonValue* obj, const char* where, Record* r) {
    const char* lk = rec_key(m, s, RF_MESSAGES);
    const JsonValue* list = json_get(obj, lk);
    if (!list) fatal(REC_HINT, "%s: the record has no \"%s\" field", where, lk);
    if (list->type != JSON_ARRAY || list->n == 0) fatal(REC_HINT, "%s: \"%s\" must be a non-empty array", where, lk);
    rec_messages(m, s, list, NULL, where, r);
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
    if (json_get(obj, rec_key(m, REC_PREFERENCE, RF_CHOSEN)) || json_get(obj, rec_key(m, REC_PREFERENCE, RF_REJECTED))) return REC_PREFERENCE;
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
    fatal(REC_HINT, "%s: the object has none of the fields \"%s\"/\"%s\", \"%s\", \"%s\", \"%s\", \"%s\"/\"%s\", \"%s\" (it has %s)", where,
          rec_key(m, REC_PREFERENCE, RF_CHOSEN), rec_key(m, REC_PREFERENCE, RF_REJECTED), rec_key(m, REC_MESSAGES, RF_MESSAGES), rec_key(m, REC_SHAREGPT, RF_MESSAGES), rec_key(m, REC_ALPACA, RF_INSTRUCTION),
          rec_key(m, REC_PROMPT, RF_PROMPT), rec_key(m, REC_PROMPT, RF_COMPLETION), rec_key(m, REC_TEXT, RF_TEXT),
          obj->n ? have : "no fields");
}

// ----------------------------------------------------------------------------------------------
// preference pairs

#define PREF_HINT "a preference record is {\"prompt\", \"chosen\", \"rejected\"}: three strings, or three lists of " \
                  "{\"role\", \"content\"} messages whose completions start with an assistant message (\"prompt\" may " \
                  "be left out: it is then the shared beginning of chosen and rejected); other names: --field, e.g. " \
                  "--field chosen=better,rejected=worse (see data/README.md)"

static int rec_msg_equal(const ChatMessage* a, const ChatMessage* b) {
    return a->role == b->role && a->content_len == b->content_len && memcmp(a->content, b->content, a->content_len) == 0;
}

// Strings without a prompt: the shared beginning, cut at a whole UTF-8 character, a space just
// before the cut going to the completions (trl.extract_prompt).
static void rec_pref_split_strings(Record* r) {
    size_t n = r->chosen_len < r->rejected_len ? r->chosen_len : r->rejected_len, i = 0;
    while (i < n && r->chosen[i] == r->rejected[i]) i++;
    while (i > 0 && i < r->chosen_len && ((unsigned char)r->chosen[i] & 0xC0) == 0x80) i--; // (a continuation byte)
    if (i > 0 && r->chosen[i - 1] == ' ') i--;
    r->prompt = r->chosen; r->prompt_len = i;
    r->chosen += i; r->chosen_len -= i;
    r->rejected += i; r->rejected_len -= i;
}

// Messages without a prompt: msgs holds chosen's then rejected's; the shared first messages
// become the prompt, and rejected's rest moves down behind chosen's rest.
static void rec_pref_split_messages(Record* r, int nc, int nr) {
    int i = 0;
    while (i < nc && i < nr && rec_msg_equal(&r->msgs[i], &r->msgs[nc + i])) i++;
    memmove(r->msgs + nc, r->msgs + nc + i, (size_t)(nr - i) * sizeof(ChatMessage));
    r->n_prompt = i; r->n_chosen = nc - i; r->n_rejected = nr - i;
    r->n_msgs = r->n_prompt + r->n_chosen + r->n_rejected;
}

// A conversational completion: not empty, starts with the assistant (it follows the generation prompt).
static void rec_pref_check_messages(const ChatMessage* c, int n, const char* which, const char* where) {
    if (n == 0) fatal(PREF_HINT, "%s: \"%s\" is empty (after the messages it shares with the other completion)", where, which);
    if (c[0].role != CHAT_ASSISTANT)
        fatal(PREF_HINT, "%s: \"%s\" starts with a %s message; a completion starts with the assistant's reply", where, which,
              chat_role_name(c[0].role));
    size_t text = 0;
    for (int k = 0; k < n; k++) text += c[k].content_len;
    if (text == 0) fatal(PREF_HINT, "%s: \"%s\" has no text (every message is empty)", where, which);
}

static void rec_pref_conversational(const RecMapping* m, const JsonValue* obj, const JsonValue* pv, const JsonValue* cv,
                                    const JsonValue* rv, const char* where, Record* r) {
    const char* pk = rec_key(m, REC_PREFERENCE, RF_PROMPT);
    r->pref_conv = 1;
    if (pv && pv->type == JSON_ARRAY) { // explicit prompt
        r->n_prompt = rec_messages(m, REC_MESSAGES, pv, pk, where, r);
        r->n_chosen = rec_messages(m, REC_MESSAGES, cv, rec_key(m, REC_PREFERENCE, RF_CHOSEN), where, r);
        r->n_rejected = rec_messages(m, REC_MESSAGES, rv, rec_key(m, REC_PREFERENCE, RF_REJECTED), where, r);
    } else { // implicit (a string "prompt" beside conversations is ignored, as TRL does)
        const int nc = rec_messages(m, REC_MESSAGES, cv, rec_key(m, REC_PREFERENCE, RF_CHOSEN), where, r);
        const int nr = rec_messages(m, REC_MESSAGES, rv, rec_key(m, REC_PREFERENCE, RF_REJECTED), where, r);
        rec_pref_split_messages(r, nc, nr);
    }
    (void)obj;
    const ChatMessage* c = r->msgs + r->n_prompt;
    rec_pref_check_messages(c, r->n_chosen, rec_key(m, REC_PREFERENCE, RF_CHOSEN), where);
    rec_pref_check_messages(c + r->n_chosen, r->n_rejected, rec_key(m, REC_PREFERENCE, RF_REJECTED), where);
    int same = r->n_chosen == r->n_rejected;
    for (int k = 0; same && k < r->n_chosen; k++) same = rec_msg_equal(&c[k], &c[r->n_chosen + k]);
    r->pref_identical = same;
}

// {"prompt", "chosen", "rejected"}: strings, or lists of messages (TRL's standard and
// conversational forms), the prompt explicit or implicit.
static void rec_preference(const RecMapping* m, const JsonValue* obj, const char* where, Record* r) {
    const char* pk = rec_key(m, REC_PREFERENCE, RF_PROMPT);
    const char* ck = rec_key(m, REC_PREFERENCE, RF_CHOSEN);
    const char* rk = rec_key(m, REC_PREFERENCE, RF_REJECTED);
    const JsonValue* pv = json_get(obj, pk);
    const JsonValue* cv = json_get(obj, ck);
    const JsonValue* rv = json_get(obj, rk);
    if (!cv || !rv) fatal(PREF_HINT, "%s: the preference record has no \"%s\" field", where, cv ? rk : ck);
    const int conv = cv->type == JSON_ARRAY;
    if ((cv->type != JSON_STRING && !conv) || rv->type != cv->type)
        fatal(PREF_HINT, "%s: \"%s\" and \"%s\" must both be strings or both lists of messages (they are %s and %s)", where, ck, rk,
              json_type_name(cv->type), json_type_name(rv->type));
    if (conv) { rec_pref_conversational(m, obj, pv, cv, rv, where, r); return; }
    if (pv && !json_is_null(pv) && pv->type != JSON_STRING)
        fatal(PREF_HINT, "%s: \"%s\" is %s, but the completions are strings", where, pk, json_type_name(pv->type));
    r->chosen = rec_string(obj, ck, 0, where, "the record", &r->chosen_len);
    r->rejected = rec_string(obj, rk, 0, where, "the record", &r->rejected_len);
    if (pv && !json_is_null(pv)) r->prompt = rec_string(obj, pk, 0, where, "the record", &r->prompt_len);
    else rec_pref_split_strings(r);
    if (r->chosen_len == 0 || r->rejected_len == 0)
        fatal(PREF_HINT, "%s: \"%s\" is empty%s", where, r->chosen_len == 0 ? ck : rk,
              pv && !json_is_null(pv) ? "" : " (after the beginning it shares with the other completion, which is the prompt)");
    r->pref_identical = r->chosen_len == r->rejected_len && memcmp(r->chosen, r->rejected, r->chosen_len) == 0;
}

void rec_from_json(const RecMapping* m, const JsonValue* obj, const char* where, Record* r) {
    if (obj->type != JSON_OBJECT) fatal(REC_HINT, "%s: expected a JSON object (a record), got %s", where, json_type_name(obj->type));
    RecSchema s = m->schema == REC_AUTO ? rec_detect(m, obj, where) : m->schema;
    r->schema = s;
    r->n_msgs = 0;
    r->text = r->prompt = r->completion = r->chosen = r->rejected = NULL;
    r->n_prompt = r->n_chosen = r->n_rejected = r->pref_conv = r->pref_identical = 0;
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
    case REC_PREFERENCE: rec_preference(m, obj, where, r); break;
    default: assertCheck(0);
    }
}

void rec_free(Record* r) {
    free(r->msgs);
    free(r->join);
    memset(r, 0, sizeof(*r));
}
