#!/usr/bin/env python3
"""TRL's side of dev/bench_pref.sh: DPO steps of TRL's DPOTrainer on the CPU, timed one by one.

    python3 dev/bench_pref.py make-pairs OUT.jsonl N        # N random preference pairs (text)
    python3 dev/bench_pref.py run --model DIR --data PAIRS.jsonl --mode lora|full --pairs B \
        --steps S [--threads N] [--bf16]

make-pairs: pairs of random lower-case words, the prompt 12 words, each completion 16 (about 25,
35 and 35 GPT-2 tokens, ~120 a pair with the prompt twice): pairs of about the same shape, so both
programs do the same work per pair.
run: DPOTrainer (TRL's defaults: sigmoid loss, beta 0.1) with B pairs a step, 1 + S steps; LoRA
r=8 alpha 16 on c_attn (PEFT; the reference is the model with the adapter off), or every
parameter with the reference's log-probabilities precomputed once (precompute_ref_log_probs, the
same as train_gpt2). bf16: torch.autocast on the CPU (DPOConfig bf16=True). Prints one line per
step, "step K <ms> ms", and the real (unpadded) tokens of a step's pairs: "tokens_per_pair T".
"""
import argparse
import json
import os
import random
import sys
import time


def make_pairs(path, n):
    r = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(r.choice(letters) for _ in range(r.randrange(2, 7))) for _ in range(2000)]
    say = lambda k: " ".join(r.choice(words) for _ in range(k))
    with open(path, "w") as f:
        for _ in range(n):
            f.write(json.dumps({"prompt": say(12), "chosen": " " + say(16), "rejected": " " + say(16)}) + "\n")


def run(a):
    import torch
    torch.set_num_threads(a.threads)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer
    rows = [json.loads(l) for l in open(a.data)]
    ds = Dataset.from_list(rows)
    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    tok.pad_token = tok.eos_token
    n_tok = sum(2 * len(tok(r["prompt"])["input_ids"]) + len(tok(r["chosen"])["input_ids"]) + len(tok(r["rejected"])["input_ids"]) + 2
                for r in rows[:64]) / min(64, len(rows))
    print("tokens_per_pair %.1f" % n_tok)
    model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32)
    peft_config = None
    if a.mode == "lora":
        from peft import LoraConfig
        peft_config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["c_attn"], fan_in_fan_out=True, task_type="CAUSAL_LM")
    cfg = DPOConfig(output_dir=a.out, per_device_train_batch_size=a.pairs, max_steps=a.steps + 1, learning_rate=1e-5,
                    logging_steps=1000, save_strategy="no", report_to=[], use_cpu=True, bf16=a.bf16, dataloader_num_workers=0,
                    precompute_ref_log_probs=a.mode == "full", disable_dropout=True, seed=1)

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            print("step %d %.1f ms" % (state.global_step, (time.perf_counter() - self.t0) * 1e3), flush=True)

    trainer = DPOTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok, peft_config=peft_config, callbacks=[Timer()])
    trainer.train()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-pairs")
    m.add_argument("out")
    m.add_argument("n", type=int)
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--tokenizer", default=None, help="default: --model")
    r.add_argument("--data", required=True)
    r.add_argument("--mode", choices=["lora", "full"], required=True)
    r.add_argument("--pairs", type=int, default=4)
    r.add_argument("--steps", type=int, default=4)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--bf16", action="store_true")
    r.add_argument("--out", default="/tmp/bench_pref_trl")
    a = ap.parse_args()
    if a.cmd == "make-pairs":
        make_pairs(a.out, a.n)
    else:
        a.tokenizer = a.tokenizer or a.model
        run(a)


if __name__ == "__main__":
    main()
