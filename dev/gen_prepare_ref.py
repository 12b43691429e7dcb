#!/usr/bin/env python3
"""Reference tokens and loss masks for data/prepare's record schemas, chat templates and record
windows (test/test_prepare.sh), produced with Hugging Face transformers and tiktoken.

The conversations are rendered by transformers' apply_chat_template with each template written
in Jinja (the form transformers and TRL use) and {% generation %} marking the assistant's
trained text; return_assistant_tokens_mask=True gives the trained tokens. The tokenizer is
GPT2TokenizerFast built from the bundled data/gpt2 files (encoder.json = vocab.json, vocab.bpe =
merges.txt), cross-checked against tiktoken. What data/README.md adds on top (one <|endoftext|>
before each record, whose mask copies the token before it, and one closing the last) is applied
here. Alpaca records become conversations by the documented rule: an optional system message,
the user's instruction (+ "\\n\\n" + input when the input is not empty), the assistant's output.

Writes (inputs and expectations; one "ids..." line then one "mask..." line per expectation):
  test/ref/prepare_alpaca.json                   a JSON array of Alpaca records
  test/ref/prepare_sharegpt.jsonl                ShareGPT records (from/value, human/gpt/system)
  test/ref/prepare_{alpaca,sharegpt}_{plain,chatml}_expected.txt
  test/ref/prepare_chatml_prompt.txt             generate --chat chatml's prompt text for the
                                                 user message "Capital of France?" (add_generation_prompt)
  test/ref/prepare_windows_expected.txt          prepare_sft.jsonl with --record-windows 24
                                                 (windows rule of data/README.md on tiktoken's ids)
  test/ref/prepare_pack.jsonl                    records of many lengths for --pack
  test/ref/prepare_pack_{inorder,bestfit,drop}_expected.txt
                                                 prepare_pack.jsonl with --pack 24 (in order;
                                                 --pack-order best-fit; --overlong drop): the
                                                 packing rule of data/README.md on tiktoken's ids,
                                                 the mask bytes with their record-start bit (2)
  test/ref/prepare_pref.jsonl                    preference records (TRL's forms: strings and
                                                 messages, explicit and implicit prompts)
  test/ref/prepare_pref_{pack,windows,drop}_expected.txt
                                                 prepare_pref.jsonl with --pack 96 (--chat-template
                                                 chatml), --record-windows 96, --pack 96 --overlong
                                                 drop: each pair's prompt and completions as TRL
                                                 makes them (trl.extract_prompt for implicit
                                                 prompts, trl.apply_chat_template with the chatml
                                                 template above for messages: the prompt with the
                                                 generation prompt, each completion the text after
                                                 it), tokenized by tiktoken, laid out by data/README.md's
                                                 rule for pairs (mask bits 4 / 8: chosen / rejected
                                                 record start)
Run: python3 dev/gen_prepare_ref.py   (with torch, transformers and trl installed: /work/venv-torch)
"""
import json
import os
import sys
import tempfile
import shutil

from transformers import GPT2TokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_tokenizer_ref import gpt2_encoding, record_tokens, SFT_RECORDS  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF = os.path.join(ROOT, "test", "ref")
EOT = 50256

PLAIN = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}System:{%- elif m['role'] == 'user' -%}User:{%- else -%}Assistant:{%- endif -%}"
    "{%- if m['role'] == 'assistant' -%}{% generation %}{{ ' ' + m['content'] + '\\n' }}{% endgeneration %}"
    "{%- else -%}{{ ' ' + m['content'] + '\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}Assistant:{%- endif -%}"
)
CHATML = (
    "{%- for m in messages -%}"
    "{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{%- if m['role'] == 'assistant' -%}{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{%- else -%}{{ m['content'] + '<|im_end|>' }}{%- endif -%}"
    "{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

ALPACA = [
    {"instruction": "Give three tips for staying healthy.", "input": "",
     "output": "1. Eat well.\n2. Exercise.\n3. Sleep enough."},
    {"instruction": "Translate to French.", "input": "The cat sleeps.", "output": "Le chat dort."},
    {"instruction": "Summarize in one word.", "input": "Rain, rain, and more rain; the café was empty.",
     "output": "Wet.", "system": "You answer briefly."},
]
SHAREGPT = [
    {"id": "a1", "conversations": [
        {"from": "system", "value": "You are a helpful assistant."},
        {"from": "human", "value": "What is 2+2?"},
        {"from": "gpt", "value": "4."},
        {"from": "human", "value": "And 3+3? Answer in words."},
        {"from": "gpt", "value": "Six."}]},
    {"id": "b2", "conversations": [
        {"from": "human", "value": "Name a colour of the sky (空)."},
        {"from": "gpt", "value": "Blue."}]},
]


def alpaca_to_messages(r):
    msgs = []
    if r.get("system"):
        msgs.append({"role": "system", "content": r["system"]})
    user = r["instruction"] + ("\n\n" + r["input"] if r.get("input") else "")
    msgs.append({"role": "user", "content": user})
    msgs.append({"role": "assistant", "content": r["output"]})
    return msgs


def sharegpt_to_messages(r):
    role = {"system": "system", "human": "user", "gpt": "assistant"}
    return [{"role": role[m["from"]], "content": m["value"]} for m in r["conversations"]]


def hf_tokenizer():
    d = tempfile.mkdtemp()
    shutil.copy(os.path.join(ROOT, "data", "gpt2", "encoder.json"), os.path.join(d, "vocab.json"))
    shutil.copy(os.path.join(ROOT, "data", "gpt2", "vocab.bpe"), os.path.join(d, "merges.txt"))
    tok = GPT2TokenizerFast.from_pretrained(d)
    shutil.rmtree(d)
    assert len(tok) == 50257 and tok.eos_token_id == EOT
    return tok


def render(tok, enc, template, conversations):
    """Stream of records: EOT (mask of the token before), the rendered conversation, ...,
    closing EOT."""
    toks, mask = [], []
    for msgs in conversations:
        mask.append(mask[-1] if mask else 0)
        toks.append(EOT)
        text = tok.apply_chat_template(msgs, chat_template=template, tokenize=False)
        out = tok.apply_chat_template(msgs, chat_template=template, tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        ids, am = list(out["input_ids"]), list(out["assistant_masks"])
        assert ids == enc.encode_ordinary(text), "transformers and tiktoken disagree on %r" % text
        assert sum(am) > 0, "no assistant tokens marked in %r" % text
        toks.extend(ids)
        mask.extend(am)
    mask.append(mask[-1])
    toks.append(EOT)
    return toks, mask


def sft_windows(enc, T):
    """data/README.md's record windows for prepare_sft.jsonl: each record's stream tokens
    (EOT first, untrained) cut to T, or followed by the closing EOT (mask of the token before)
    and untrained EOT padding; a window with no trained token is dropped; one closing EOT."""
    toks, mask = [], []
    for r in SFT_RECORDS:
        t, m = record_tokens(enc, r)
        if len(t) > T:
            t, m = t[:T], m[:T]
        elif len(t) < T:
            t.append(EOT)
            m.append(m[-1])
            t += [EOT] * (T - len(t))
            m += [0] * (T - len(m))
        if sum(m[1:]) == 0:
            continue
        toks += t
        mask += m
    toks.append(EOT)
    mask.append(0)
    return toks, mask


# Records for --pack: lengths from 2 to beyond the window (cut, or dropped with --overlong drop),
# one that trains nothing (dropped), several of equal length (ties in best-fit), a conversation.
PACK_RECORDS = [
    {"text": "One."},
    {"prompt": "Question: what colour is grass?\nAnswer:", "completion": " Green."},
    {"text": "A sentence of a middling length, for the packer."},
    {"text": "Short text."},
    {"prompt": "A prompt with nothing after it:", "completion": ""},
    {"text": "This record is far too long for a window of twenty-four tokens, so it is cut there or left out, as --overlong says."},
    {"text": "Tiny."},
    {"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]},
    {"text": "Another short text."},
    {"prompt": "2+2=", "completion": " 4"},
    {"text": "Medium record with some words in it."},
    {"text": "Ok."},
]


def packed(enc, records, T, best_fit=False, drop=False):
    """data/README.md's packing: records cut to T (or dropped), records that train nothing
    dropped; each record's stop is the mask of its last token (0 after a cut). In order: a new
    window when the next record does not fit. Best-fit: longest first (ties in input order), each
    into the window with the least free space that holds it (ties: the window that reached that
    free space last), else a new window; windows in the order opened, records in the order placed.
    A record's first token: the stop of what precedes it, plus 2 (record start); the padding that
    ends a window: EOT, its first token the last record's stop plus 2, the rest 0; after the last
    window one EOT with the last stop."""
    recs = []
    for r in records:
        t, m = record_tokens(enc, r)
        cut = len(t) > T
        if cut and drop:
            continue
        t, m = t[:T], m[:T]
        if sum(m[1:]) == 0:
            continue
        recs.append((t, m, 0 if cut else m[-1]))
    windows = []
    if best_fit:
        stacks = {}  # free space -> windows with it, the last reached on top
        for i in sorted(range(len(recs)), key=lambda i: -len(recs[i][0])):
            n = len(recs[i][0])
            fits = [f for f, ws in stacks.items() if f >= n and ws]
            if fits:
                f = min(fits)
                w = stacks[f].pop()
            else:
                w, f = len(windows), T
                windows.append([])
            windows[w].append(i)
            if f - n > 0:
                stacks.setdefault(f - n, []).append(w)
    else:
        fill = T
        for i, (t, _, _) in enumerate(recs):
            if fill + len(t) > T:
                windows.append([])
                fill = 0
            windows[-1].append(i)
            fill += len(t)
    toks, mask, stop = [], [], 0
    for w in windows:
        fill = 0
        for i in w:
            t, m, s = recs[i]
            toks += t
            mask += [stop | 2] + m[1:]
            stop = s
            fill += len(t)
        for k in range(T - fill):
            toks.append(EOT)
            mask.append(stop | 2 if k == 0 else 0)
            stop = 0
    toks.append(EOT)
    mask.append(stop)
    return toks, mask


# Preference records: TRL's forms (strings, messages; explicit and implicit prompts), a pair far
# longer than the window (cut, or dropped with --overlong drop), identical completions, very
# different lengths, completions that differ in their first token only.
PREF_RECORDS = [
    {"prompt": "The capital of France is", "chosen": " Paris.", "rejected": " London."},
    {"prompt": "2 + 2 =", "chosen": " 4", "rejected": " 5, because arithmetic is hard and small models cannot count."},
    {"chosen": "Q: What colour is the sky? A: blue", "rejected": "Q: What colour is the sky? A: green"},
    {"prompt": [{"role": "user", "content": "Hi"}], "chosen": [{"role": "assistant", "content": "Hello!"}],
     "rejected": [{"role": "assistant", "content": "Go away."}]},
    {"chosen": [{"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "Apple."}],
     "rejected": [{"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "Carrot."}]},
    {"prompt": "Say yes:", "chosen": " yes", "rejected": " yes"},
    {"prompt": "A very long prompt that goes on and on, with many words, so that the pair does not fit",
     "chosen": " into a window of ninety-six tokens however it is packed together with the rejected one, since this"
               " completion alone keeps going for many more tokens than half of such a window holds, and then some more,"
               " with a list: one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, thirteen.",
     "rejected": " short"},
    {"prompt": "Pick:", "chosen": " alpha beta gamma", "rejected": " delta beta gamma"},
]


def pref_parts(tok, r):
    """(prompt, chosen, rejected) text pieces as TRL makes them."""
    from trl import extract_prompt, apply_chat_template
    ex = dict(r)
    if "prompt" not in ex:
        ex = extract_prompt(ex)
    if isinstance(ex["chosen"], list):
        tok.chat_template = CHATML.replace("{% generation %}", "").replace("{% endgeneration %}", "")
        ex = apply_chat_template(ex, tok)
    return ex["prompt"], ex["chosen"], ex["rejected"]


def pref_packed(enc, tok, T, one=False, drop=False):
    """data/README.md's pairs: two records, [EOT] + prompt (untrained) + completion (trained),
    the stop after each (the next record's EOT) trained unless it was cut; a pair longer than T
    cut (the shorter record whole if it fits in half, the longer to the rest; else each to half:
    the chosen one T - T/2) or dropped; packed in order (one a window with --record-windows); the
    first token of a record gets its start (2) and chosen (4) or rejected (8) bits."""
    pairs = []
    for r in PREF_RECORDS:
        p, c, j = pref_parts(tok, r)
        recs = []
        for comp in (c, j):
            pi, ci = enc.encode_ordinary(p), enc.encode_ordinary(comp)
            recs.append(([EOT] + pi + ci, [0] + [0] * len(pi) + [1] * len(ci)))
        lc, lr = len(recs[0][0]), len(recs[1][0])
        kc, kr = lc, lr
        if lc + lr > T:
            if drop:
                continue
            if lc <= T // 2: kr = T - lc
            elif lr <= T // 2: kc = T - lr
            else: kc, kr = T - T // 2, T // 2
        cut = [(recs[0][0][:kc], recs[0][1][:kc], 0 if kc < lc else 1), (recs[1][0][:kr], recs[1][1][:kr], 0 if kr < lr else 1)]
        if any(sum(m[1:]) == 0 for _, m, _ in cut):
            continue
        pairs.append(cut)
    windows, fill = [], T
    for i, pr in enumerate(pairs):
        n = len(pr[0][0]) + len(pr[1][0])
        if one or fill + n > T:
            windows.append([])
            fill = 0
        windows[-1].append(i)
        fill += n
    toks, mask, stop = [], [], 0
    for w in windows:
        fill = 0
        for i in w:
            for role, (t, m, s) in zip((4, 8), pairs[i]):
                toks += t
                mask += [stop | 2 | role] + m[1:]
                stop = s
                fill += len(t)
        for k in range(T - fill):
            toks.append(EOT)
            mask.append(stop | 2 if k == 0 else 0)
            stop = 0
    toks.append(EOT)
    mask.append(stop)
    return toks, mask


def write_expected(name, toks, mask):
    with open(os.path.join(REF, name), "w") as f:
        f.write(" ".join(map(str, toks)) + "\n")
        f.write(" ".join(map(str, mask)) + "\n")
    print("wrote test/ref/%s: %d tokens, %d trained" % (name, len(toks), sum(x & 1 for x in mask)))


def main():
    enc = gpt2_encoding()
    tok = hf_tokenizer()
    with open(os.path.join(REF, "prepare_alpaca.json"), "w", encoding="utf-8") as f:
        json.dump(ALPACA, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(REF, "prepare_sharegpt.jsonl"), "w", encoding="utf-8") as f:
        for r in SHAREGPT:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    convs = {"alpaca": [alpaca_to_messages(r) for r in ALPACA],
             "sharegpt": [sharegpt_to_messages(r) for r in SHAREGPT]}
    for data, msgs in convs.items():
        for name, template in (("plain", PLAIN), ("chatml", CHATML)):
            write_expected("prepare_%s_%s_expected.txt" % (data, name), *render(tok, enc, template, msgs))
    prompt = tok.apply_chat_template([{"role": "user", "content": "Capital of France?"}], chat_template=CHATML,
                                     tokenize=False, add_generation_prompt=True)
    with open(os.path.join(REF, "prepare_chatml_prompt.txt"), "w", encoding="utf-8") as f:
        f.write(prompt)
    print("wrote test/ref/prepare_chatml_prompt.txt: %d tokens" % len(enc.encode_ordinary(prompt)))
    write_expected("prepare_windows_expected.txt", *sft_windows(enc, 24))
    with open(os.path.join(REF, "prepare_pack.jsonl"), "w", encoding="utf-8") as f:
        for r in PACK_RECORDS:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    write_expected("prepare_pack_inorder_expected.txt", *packed(enc, PACK_RECORDS, 24))
    write_expected("prepare_pack_bestfit_expected.txt", *packed(enc, PACK_RECORDS, 24, best_fit=True))
    write_expected("prepare_pack_drop_expected.txt", *packed(enc, PACK_RECORDS, 24, drop=True))
    with open(os.path.join(REF, "prepare_pref.jsonl"), "w", encoding="utf-8") as f:
        for r in PREF_RECORDS:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    write_expected("prepare_pref_pack_expected.txt", *pref_packed(enc, tok, 96))
    write_expected("prepare_pref_windows_expected.txt", *pref_packed(enc, tok, 96, one=True))
    write_expected("prepare_pref_drop_expected.txt", *pref_packed(enc, tok, 96, drop=True))


if __name__ == "__main__":
    main()
