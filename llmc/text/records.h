// Training records from JSON objects: which fields hold the text, and how a record is read as
// plain text, a prompt/completion pair or a conversation.
//
// Schemas (field names are the defaults; --field renames them):
//   text               {"text": T}                                   all trained
//   prompt-completion  {"prompt": P, "completion": C}                C trained
//   alpaca             {"instruction": I, "input": X, "output": O}   a conversation: an optional
//                      "system" message, the user's I (+ "\n\n" + X when X is not empty), the
//                      assistant's O
//   messages           {"messages": [{"role": R, "content": C}, ...]}
//   sharegpt           {"conversations": [{"from": R, "value": C}, ...]}
//   preference         {"prompt": P, "chosen": C, "rejected": R}     a pair (preference
//                      objectives: DPO, IPO, ORPO, SimPO), TRL's two standard forms: strings,
//                      or each of the three a list of messages (conversational: the prompt is
//                      rendered with the generation prompt, the completions after it, each
//                      starting with an assistant message). Without "prompt" (TRL's implicit
//                      prompt) it is the longest shared beginning of chosen and rejected: whole
//                      messages, or for strings whole UTF-8 characters, a space at the cut going
//                      to the completions (trl.extract_prompt)
// Conversation roles are mapped to system / user / assistant by name: system, user, human ->
// user, assistant, gpt -> assistant by default, more with --role NAME=ROLE.
// Auto-detection, per record: chosen or rejected (preference), then the messages list, then the
// conversations list, then instruction (alpaca), then prompt or completion, then text.
#ifndef LLMC_RECORDS_H
#define LLMC_RECORDS_H

#include <stddef.h>
#include "text/chat.h"
#include "base/json.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { REC_AUTO, REC_TEXT, REC_PROMPT, REC_ALPACA, REC_MESSAGES, REC_SHAREGPT, REC_PREFERENCE, REC_N_SCHEMA } RecSchema;
#define REC_SCHEMA_NAMES "auto|text|prompt-completion|alpaca|messages|sharegpt|preference"

typedef enum {
    RF_TEXT, RF_PROMPT, RF_COMPLETION, RF_INSTRUCTION, RF_INPUT, RF_OUTPUT, RF_SYSTEM,
    RF_MESSAGES, RF_ROLE, RF_CONTENT, RF_CHOSEN, RF_REJECTED, RF_N
} RecField;
#define REC_FIELD_NAMES "text, prompt, completion, instruction, input, output, system, messages, role, content, chosen, rejected"

#define REC_MAX_ROLES 64
typedef struct {
    RecSchema schema;              // REC_AUTO: detected per record
    const char* field[RF_N];       // renamed fields (NULL: the schema's own name)
    char role_name[REC_MAX_ROLES][64];
    ChatRole role[REC_MAX_ROLES];
    int n_roles;
} RecMapping;

// A record as read from one JSON object. Strings point into the JSON tree (or into the
// record's own buffer for a joined alpaca instruction); valid until the next rec_from_json.
typedef struct {
    RecSchema schema;              // the schema it was read with
    const char* text; size_t text_len;
    const char* prompt; size_t prompt_len;
    const char* completion; size_t completion_len;
    ChatMessage* msgs; int n_msgs;
    int msg_cap;
    // REC_PREFERENCE: strings (pref_conv 0: prompt above, may be empty) or messages (pref_conv 1:
    // msgs[0, n_prompt) the prompt, then n_chosen of the chosen completion, then n_rejected)
    int pref_conv;
    const char* chosen; size_t chosen_len;
    const char* rejected; size_t rejected_len;
    int n_prompt, n_chosen, n_rejected;
    int pref_identical;            // chosen and rejected are the same (the caller warns)
    char* join; size_t join_cap;
} Record;

void rec_mapping_init(RecMapping* m);
// Schema by name (one of REC_SCHEMA_NAMES), or -1.
int rec_schema_parse(const char* name);
// "NAME=KEY[,NAME=KEY...]": field NAME (one of REC_FIELD_NAMES) is called KEY in the data.
// "NAME=ROLE[,...]": role NAME in the data is ROLE (system, user or assistant). Both return 0, or
// -1 with the reason in err. The mapping keeps pointers into spec.
int rec_mapping_set_fields(RecMapping* m, char* spec, char* err, size_t errcap);
int rec_mapping_set_roles(RecMapping* m, const char* spec, char* err, size_t errcap);

// Reads obj (a JSON object) as a record. Fatal, naming `where` ("'x.jsonl' line 3") and the
// field, when the object fits no schema or a field is missing or not a string; for a preference
// pair also when chosen or rejected is empty (after the shared prompt), chosen and rejected are
// of different forms, or a conversational completion does not start with an assistant message.
void rec_from_json(const RecMapping* m, const JsonValue* obj, const char* where, Record* r);
void rec_free(Record* r);

#ifdef __cplusplus
}
#endif
#endif // LLMC_RECORDS_H
