// Chat templates: how a conversation becomes the tokens a model is trained on (data/prepare)
// and prompted with (generate --chat). Both programs render through chat_render, so a model is
// prompted exactly the way its training data was written.
//
// A message is rendered as three pieces, each encoded with the tokenizer on its own (so the
// loss mask changes exactly between pieces):
//   header  the role marker, never trained            "User:"            "<|im_start|>user\n"
//   body    the content with its fixed prefix/suffix;  " Paris.\n"         "Paris.<|im_end|>"
//           trained for assistant messages
//   tail    after the body, never trained             ""                 "\n"
// Templates (GPT-2 has no chat special tokens, so every marker is ordinary text):
//   plain   "System:" / "User:" / "Assistant:" headers, body " " + content + "\n"
//   chatml  "<|im_start|>" + role + "\n" headers, body content + "<|im_end|>", tail "\n"
// A generation prompt is the conversation followed by the assistant header. A generated reply
// ends at <|endoftext|> or at the template's stop text ("\nUser:" plain, "<|im_end|>" chatml).
// Each conversation (training record or prompt) is preceded by one <|endoftext|>; that token
// belongs to the callers' document convention (data/README.md), not to the template.
#ifndef LLMC_CHAT_H
#define LLMC_CHAT_H

#include <stddef.h>
#include <stdint.h>
#include "text/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CHAT_SYSTEM = 0, CHAT_USER = 1, CHAT_ASSISTANT = 2 } ChatRole;

typedef struct {
    ChatRole role;
    const char* content;   // UTF-8, content_len bytes (may hold NUL)
    size_t content_len;
} ChatMessage;

typedef struct {
    const char* name;
    const char* header[3];  // per ChatRole
    const char* body_prefix;
    const char* body_suffix;
    const char* tail;
    const char* stop;       // text that ends an assistant reply when generating
} ChatTemplate;

// "plain|chatml": the names chat_template_get knows, for --help and messages.
#define CHAT_TEMPLATE_NAMES "plain|chatml"
// The template of that name, or NULL.
const ChatTemplate* chat_template_get(const char* name);
// "system" / "user" / "assistant".
const char* chat_role_name(ChatRole r);

// One piece of rendered text and whether its tokens are trained (as targets).
typedef void (*ChatEmitFn)(void* ctx, const char* text, size_t len, int trained);
// Render msgs[0..n) piece by piece; add_generation_prompt appends the assistant header.
void chat_render(const ChatTemplate* t, const ChatMessage* msgs, int n, int add_generation_prompt,
                 ChatEmitFn emit, void* ctx);

// A completion that follows a generation prompt (the completions of a preference pair, as TRL
// renders them: the whole text after the prompt rendered with add_generation_prompt): msgs[0]
// must be the assistant's, and its header is left out (the generation prompt is that header);
// every piece is emitted as trained, tails and the headers of later messages included.
void chat_render_completion(const ChatTemplate* t, const ChatMessage* msgs, int n, ChatEmitFn emit, void* ctx);

// The tokens of a generation prompt: <|endoftext|> (when the vocabulary has it), then msgs
// rendered with the generation prompt, each piece encoded on its own. Appends to out.
// allow_special: recognise <|endoftext|> written inside message contents.
void chat_encode_prompt(const ChatTemplate* t, Tokenizer* tok, const ChatMessage* msgs, int n,
                        int allow_special, TokIds* out);

// Holds back generated text that may be the start of the stop text, so a reply is printed up to
// (not including) the stop text. Feed bytes as they come; chat_stop_feed returns how many bytes
// of *out (valid until the next call) may be printed, and sets s->stopped once the stop text
// appeared (everything from it on is dropped). chat_stop_flush returns what is held at the end.
typedef struct {
    const char* stop;
    size_t stop_len;
    char* buf;              // held bytes
    size_t held, cap;
    char* out;              // the bytes released by the last call
    size_t out_cap;
    int stopped;
} ChatStopFilter;

void chat_stop_init(ChatStopFilter* s, const char* stop);
size_t chat_stop_feed(ChatStopFilter* s, const char* bytes, size_t n, const char** out);
size_t chat_stop_flush(ChatStopFilter* s, const char** out);
void chat_stop_free(ChatStopFilter* s);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CHAT_H
