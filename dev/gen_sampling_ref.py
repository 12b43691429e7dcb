#!/usr/bin/env python3
"""Reference for the sampling tests (test/test_sampling.c): greedy generation by Hugging Face
transformers' `generate` (do_sample=False, KV cache on) on the tiny GPT-2 of test/ref/gpt2_tiny
(vocab 100, so prompts are token ids), plain and with PEFT adapters from test/ref/lora_tiny/,
and on test/ref/sampling_tiny: a GPT-2 made here by transformers with large random weights
(GPT2Config n_embd 32, 2 layers, 4 heads, vocab 100, n_positions 64, initializer_range 0.35,
torch seed 1; save_pretrained), because gpt2_tiny's small init makes greedy decoding repeat one
token, while this one produces a varied sequence (every step's choice depends on the last).

Writes test/ref/sampling_ref.safetensors:
  prompt                 int32 (P,)   the prompt ids
  <case>.ids             int32 (N,)   the generated ids
  <case>.logits          f32 (N, V)   the logits of the last position at each step (what the
                                      greedy choice was made from)
for case in: base (sampling_tiny), tiny (gpt2_tiny), lora.all_linear, lora.bias_lnf (PeftModel.from_pretrained on the base).
No end-of-sequence stop (eos_token_id None): exactly N new tokens.

Run from the repo root: /opt/refenv/bin/python dev/gen_sampling_ref.py
"""
import copy, os
import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel
from peft import PeftModel

BASE = "test/ref/gpt2_tiny"
OUT = "test/ref/sampling_ref.safetensors"
MODEL = "test/ref/sampling_tiny"
PROMPT = [5, 17, 42, 3, 88, 11, 64]
NEW = 24
ADAPTERS = ["all_linear", "bias_lnf"]


def greedy_generate(model, prompt, new, **extra):
    """transformers' greedy generate of exactly `new` tokens after the ids `prompt` (no end-of-sequence
    stop, KV cache on); extra: more GenerationConfig fields (repetition_penalty) or generate()
    arguments (output_logits, return_dict_in_generate). The dev/gen_*_ref.py scripts share it."""
    gc = copy.deepcopy(model.generation_config)
    gc.eos_token_id = None
    gc.bos_token_id = None
    gc.pad_token_id = 0
    gc.do_sample = False
    gc.max_new_tokens = new
    gc.use_cache = True
    for k in [k for k in extra if hasattr(gc, k) and k not in ("output_logits", "return_dict_in_generate")]:
        setattr(gc, k, extra.pop(k))
    inp = torch.tensor([prompt])
    with torch.no_grad():
        return model.generate(input_ids=inp, attention_mask=torch.ones_like(inp), generation_config=gc, **extra)


def greedy(model):
    out = greedy_generate(model, PROMPT, NEW, output_logits=True, return_dict_in_generate=True)
    ids = out.sequences[0, len(PROMPT):].to(torch.int32)
    logits = torch.stack([l[0] for l in out.logits]).float()
    assert ids.shape[0] == NEW, ids.shape
    assert torch.equal(logits.argmax(-1).to(torch.int32), ids)
    return ids.contiguous(), logits.contiguous()


def main():
    torch.manual_seed(0)
    t = {"prompt": torch.tensor(PROMPT, dtype=torch.int32)}
    torch.manual_seed(1)
    cfg = GPT2Config(vocab_size=100, n_positions=64, n_embd=32, n_layer=2, n_head=4, initializer_range=0.35,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=99, eos_token_id=99)
    GPT2LMHeadModel(cfg).eval().save_pretrained(MODEL)
    big = GPT2LMHeadModel.from_pretrained(MODEL).eval()
    t["base.ids"], t["base.logits"] = greedy(big)
    tiny = GPT2LMHeadModel.from_pretrained(BASE).eval()
    t["tiny.ids"], t["tiny.logits"] = greedy(tiny)
    for name in ADAPTERS:
        m = GPT2LMHeadModel.from_pretrained(BASE).eval()
        pm = PeftModel.from_pretrained(m, os.path.join("test/ref/lora_tiny", name)).eval()
        ids, logits = greedy(pm)
        t[f"lora.{name}.ids"], t[f"lora.{name}.logits"] = ids, logits
        print(f"lora.{name}: {ids.tolist()}")
    print("base:", t["base.ids"].tolist())
    save_file(t, OUT, metadata={"generator": "dev/gen_sampling_ref.py", "new_tokens": str(NEW)})
    print("wrote", OUT)


if __name__ == "__main__":
    main()
