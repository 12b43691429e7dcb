#include "text/chat.h"
#include "base/check.h"
#include <stdlib.h>
#include <string.h>

static const ChatTemplate CHAT_TEMPLATES[] = {
    // the rendering data/prepare always used for {"messages": ...} records
    { "plain", { "System:", "User:", "Assistant:" }, " ", "\n", "", "\nUser:" },
    // ChatML as plain text: the markers are several GPT-2 tokens each, which is fine for
    // training; a reply ends with the <|im_end|> text, trained with the content
    { "chatml", { "<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n" },
      "", "<|im_end|>", "\n", "<|im_end|>" },
};

const ChatTemplate* chat_template_get(const char* name) {
    for (size_t i = 0; i < sizeof(CHAT_TEMPLATES) / sizeof(CHAT_TEMPLATES[0]); i++)
        if (name && strcmp(CHAT_TEMPLATES[i].name, name) == 0) return &CHAT_TEMPLATES[i];
    return NULL;
}

const char* chat_role_name(ChatRole r) {
    static const char* names[] = { "system", "user", "assistant" };
    return (unsigned)r < 3 ? names[r] : "?";
}

// The body is rendered as one piece: prefix + content + suffix.
static void chat_emit_body(const ChatTemplate* t, const ChatMessage* m, ChatEmitFn emit, void* ctx) {
    size_t lp = strlen(t->body_prefix), ls = strlen(t->body_suffix);
    size_t n = lp + m->content_len + ls;
    char* buf = (char*)mallocCheck(n + 1);
    memcpy(buf, t->body_prefix, lp);
    if (m->content_len) memcpy(buf + lp, m->content, m->content_len);
    memcpy(buf + lp + m->content_len, t->body_suffix, ls);
    buf[n] = 0;
    emit(ctx, buf, n, m->role == CHAT_ASSISTANT);
    free(buf);
}

void chat_render(const ChatTemplate* t, const ChatMessage* msgs, int n, int add_generation_prompt,
                 ChatEmitFn emit, void* ctx) {
    for (int i = 0; i < n; i++) {
        const ChatMessage* m = &msgs[i];
        assertCheck((unsigned)m->role < 3);
        emit(ctx, t->header[m->role], strlen(t->header[m->role]), 0);
        chat_emit_body(t, m, emit, ctx);
        if (*t->tail) emit(ctx, t->tail, strlen(t->tail), 0);
    }
    if (add_generation_prompt) emit(ctx, t->header[CHAT_ASSISTANT], strlen(t->header[CHAT_ASSISTANT]), 0);
}

typedef struct { ChatEmitFn emit; void* ctx; } TrainAll;
static void chat_emit_trained(void* ctx, const char* text, size_t len, int trained) {
    const TrainAll* a = (const TrainAll*)ctx;
    (void)trained;
    a->emit(a->ctx, text, len, 1);
}

void chat_render_completion(const ChatTemplate* t, const ChatMessage* msgs, int n, ChatEmitFn emit, void* ctx) {
    if (n < 1 || msgs[0].role != CHAT_ASSISTANT) fatal("this is a bug in llmc", "a completion must start with the assistant's message");
    TrainAll a = { emit, ctx };
    chat_emit_body(t, &msgs[0], chat_emit_trained, &a);
    if (*t->tail) emit(ctx, t->tail, strlen(t->tail), 1);
    chat_render(t, msgs + 1, n - 1, 0, chat_emit_trained, &a);
}

typedef struct { Tokenizer* tok; TokIds* out; int allow_special; } PromptCtx;

static void chat_prompt_emit(void* ctx, const char* text, size_t len, int trained) {
    PromptCtx* p = (PromptCtx*)ctx;
    (void)trained;
    tok_encode_append(p->tok, text, len, p->allow_special, p->out);
}

void chat_encode_prompt(const ChatTemplate* t, Tokenizer* tok, const ChatMessage* msgs, int n,
                        int allow_special, TokIds* out) {
    if (tok->eot_id >= 0) tokids_push(out, tok->eot_id);
    PromptCtx p = { tok, out, allow_special };
    chat_render(t, msgs, n, 1, chat_prompt_emit, &p);
}

// ----------------------------------------------------------------------------------------------
// stop text

static void chat_grow(char** buf, size_t* cap, size_t need) {
    if (need <= *cap) return;
    *cap = 2 * need + 64;
    *buf = (char*)realloc(*buf, *cap);
    if (!*buf) fatal(NULL, "out of memory");
}

void chat_stop_init(ChatStopFilter* s, const char* stop) {
    memset(s, 0, sizeof(*s));
    s->stop = stop;
    s->stop_len = strlen(stop);
}

size_t chat_stop_feed(ChatStopFilter* s, const char* bytes, size_t n, const char** out) {
    *out = "";
    if (s->stopped || n == 0) return 0;
    size_t len = s->held + n;
    chat_grow(&s->buf, &s->cap, len);
    chat_grow(&s->out, &s->out_cap, len);
    memcpy(s->buf + s->held, bytes, n);
    *out = s->out;
    // held bytes are a proper prefix of the stop text, so the buffer is short: search it all
    for (size_t i = 0; s->stop_len && i + s->stop_len <= len; i++) {
        if (memcmp(s->buf + i, s->stop, s->stop_len) == 0) {
            memcpy(s->out, s->buf, i);
            s->stopped = 1; s->held = 0;
            return i;
        }
    }
    // hold back the longest suffix that is a proper prefix of the stop text
    size_t keep = s->stop_len ? (len < s->stop_len - 1 ? len : s->stop_len - 1) : 0;
    while (keep && memcmp(s->buf + len - keep, s->stop, keep) != 0) keep--;
    size_t rel = len - keep;
    memcpy(s->out, s->buf, rel);
    memmove(s->buf, s->buf + rel, keep);
    s->held = keep;
    return rel;
}

size_t chat_stop_flush(ChatStopFilter* s, const char** out) {
    *out = s->held ? s->buf : "";
    size_t n = s->stopped ? 0 : s->held;
    s->held = 0;
    return n;
}

void chat_stop_free(ChatStopFilter* s) {
    free(s->buf);
    free(s->out);
    memset(s, 0, sizeof(*s));
}
