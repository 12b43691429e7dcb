#!/usr/bin/env python3
"""What DeepSpeed's and accelerate's memory estimators say for the GPT-2 sizes, for docs/MEMORY.md
(dev/memory_table.sh puts them beside llmc's plan). Not a test.

  DeepSpeed (deepspeed.runtime.zero): estimate_zero2_model_states_mem_needs (stage 2) and
    estimate_zero3_model_states_mem_needs (stage 3), without offload, per GPU: model states only
    (parameters, gradients, Adam's state), no activations, no buffers. They take the parameter
    count a user gets from the model (every parameter, also for LoRA: the estimators do not know
    which ones train, deepspeed#5304); there is no estimator for stages 0 and 1.
  accelerate (accelerate.commands.estimate): `accelerate estimate-memory`'s figures, computed on an
    empty GPT2LMHeadModel built from the size's config (the command itself fetches the config from
    the Hub): the weights' size ("Total Size") and "Training using Adam" for bf16 mixed precision,
    for one GPU, batch size 1, no activations; int4 divides the load size by 8 (its QLoRA figure).

Prints one JSON object per (size, ranks): {"size", "params", "largest_layer", "ranks",
"deepspeed_z2", "deepspeed_z3", "accelerate_load_fp32", "accelerate_load_int4",
"accelerate_train_bf16"} in bytes.  Run with /work/venv-torch/bin/python dev/estimators.py
"""
import json
import torch
from accelerate import init_empty_weights
from accelerate.utils import calculate_maximum_sizes
from accelerate.commands.estimate import estimate_training_usage
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
from transformers import GPT2Config, GPT2LMHeadModel

SIZES = [("124M", 768, 12, 12), ("355M", 1024, 16, 24), ("774M", 1280, 20, 36), ("1.5B", 1600, 25, 48)]


def main():
    for name, C, NH, L in SIZES:
        with init_empty_weights():
            model = GPT2LMHeadModel(GPT2Config(n_embd=C, n_head=NH, n_layer=L))
        model.tie_weights()  # (tied on a real model; under init_empty_weights only when asked)
        total_size, largest = calculate_maximum_sizes(model)
        # DeepSpeed's model_to_params: every parameter once (the tied lm_head counted once)
        params = sum(dict((id(p), p.numel()) for p in model.parameters()).values())
        largest_layer = max(p.numel() for p in model.parameters())
        train = estimate_training_usage(total_size, "bfloat16")
        for ranks in (1, 2, 8):
            _, z2 = estimate_zero2_model_states_mem_needs(params, num_gpus_per_node=ranks, cpu_offload=False)
            _, z3, _ = estimate_zero3_model_states_mem_needs(params, largest_layer, num_gpus_per_node=ranks, cpu_offload=False,
                                                          cpu_offload_params=False)
            print(json.dumps({"size": name, "params": params, "largest_layer": largest_layer, "ranks": ranks,
                              "deepspeed_z2": z2, "deepspeed_z3": z3, "accelerate_load_fp32": total_size,
                              "accelerate_load_int4": total_size // 8, "accelerate_train_bf16": max(train.values())}))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
