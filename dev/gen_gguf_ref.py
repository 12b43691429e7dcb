#!/usr/bin/env python3
"""GGUF export checked by llama.cpp itself (issue 33), and the small references test/ref/gguf/ holds.

Needs: torch, transformers, peft, safetensors, numpy, gguf (llama.cpp's gguf-py) and
llama-cpp-python (which builds llama.cpp), plus a built `convert` (make BACKEND=cpu):

    python3 dev/gen_gguf_ref.py [--convert build/cpu/bin/convert] [--skip-124m] [--write-ref]

For a tiny GPT-2 (`--model tiny --seed 11`: 2 layers, 64 channels, GPT-2's vocabulary), a
124M-shaped one (`d12 --seed 11`) and, with --trained, a trained model (`make quickstart`'s
out/lora_tiny/base, and with --trained-adapter its LoRA fine-tune merged), every
`convert --to gguf --gguf-type T` file:
  - gguf-py's GGUFReader reads it: keys, value types, tensor names, shapes and types as expected;
    every Q8_0 tensor is byte-identical to gguf-py's quantizer (quants.quantize) on the f32 file's
    tensor, and a crafted tensor with rounding ties and zero blocks is committed with gguf-py's bytes;
  - llama.cpp loads it on its own (its tokenizer gives transformers' ids for the prompt), and its
    logits for the prompt match transformers' GPT2LMHeadModel on the same weights:
      vs transformers stock:                                 max|d| / max|ref| within TOL_STOCK[T]
      vs transformers with ggml's GELU (an fp16 lookup table on the CPU) on the weights the file
      holds (dequantized):                                    within TOL_SAME[T]
    greedy continuations equal wherever the top-2 margin exceeds the type's tolerance;
  - a PEFT LoRA adapter exported with `--to gguf-lora` and applied by llama.cpp (--lora) gives the
    logits of llama.cpp on the merged model (`convert --to gguf --adapter`) and of PEFT's
    merge_and_unload.
With --write-ref it writes test/ref/gguf/: the PEFT adapter, llama.cpp's logits (a column subset,
argmax and top-2 margin per position) for every tiny file, the files' SHA-256 and the Q8_0 bytes,
which test/test_gguf.c and test/test_convert.sh compare against without any Python.
"""
import argparse, hashlib, json, os, subprocess, sys, tempfile

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF = os.path.join(REPO, "test", "ref", "gguf")
TYPES = ["f32", "f16", "bf16", "q8_0"]
PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time, in a land far away,"
SEED = 11
COL_STRIDE = 64          # logits columns kept in the references: 0, 64, 128, ...
N_GREEDY = 8

# Tolerances, max|llama.cpp - transformers| / max|transformers| over the prompt's logits.
# llama.cpp's CPU GELU goes through an fp16 table (ggml-cpu/vec.h, GGML_GELU_FP16: input and
# output rounded to fp16, ~5e-4 relative per activation), which alone sets a floor of 2e-4 (tiny)
# to 5e-4 (124M) on the f32 file: transformers with that same GELU emulated ("same") gets no
# closer, because the table is discontinuous (moving its inputs by 1e-7 relative moves the 124M
# logits by 3e-4, as measured here). With F16 / BF16 / Q8_0 weights llama.cpp also rounds the
# activations to that type before each matmul (ggml's vec_dot_type). "same" compares with
# transformers on the dequantized weights the file holds, i.e. isolates llama.cpp's arithmetic.
TOL_STOCK = {"f32": 1e-3, "f16": 3e-3, "bf16": 3e-2, "q8_0": 5e-2}
TOL_SAME = {"f32": 1e-3, "f16": 3e-3, "bf16": 3e-2, "q8_0": 5e-2}
TOL_LORA = 1e-4          # llama.cpp base + --lora vs llama.cpp on the merged model (both f32)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    return r.stdout


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def rel_rms(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b ** 2)))


# ---- transformers

def ggml_gelu(x):
    """ggml's CPU GELU: tanh form in fp32 on the fp16-rounded input, result rounded to fp16
    (ggml_table_gelu_f16), identity above 10 and 0 below -10."""
    xh = x.to(torch.float16).to(torch.float32)
    y = 0.5 * xh * (1.0 + torch.tanh(0.7978845608028654 * xh * (1.0 + 0.044715 * xh * xh)))
    y = y.to(torch.float16).to(torch.float32)
    return torch.where(x <= -10.0, torch.zeros_like(x), torch.where(x >= 10.0, x, y))


class GgmlGelu(torch.nn.Module):
    def forward(self, x):
        return ggml_gelu(x)


def hf_model(path, gelu=False):
    from transformers import GPT2LMHeadModel
    m = GPT2LMHeadModel.from_pretrained(path, dtype=torch.float32).eval()
    if gelu:
        for blk in m.transformer.h:
            blk.mlp.act = GgmlGelu()
    return m


def hf_logits(m, ids):
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0].numpy().astype(np.float64)


def hf_greedy(m, ids, n):
    out = list(ids)
    with torch.no_grad():
        for _ in range(n):
            out.append(int(m(torch.tensor([out])).logits[0, -1].argmax()))
    return out[len(ids):]


def load_gguf_weights(m, gguf_path):
    """Put the (dequantized) weights of a GGUF file into a transformers GPT-2, via gguf-py."""
    import gguf
    from gguf import quants
    r = gguf.GGUFReader(gguf_path)
    sd = m.state_dict()
    names = {"token_embd.weight": "transformer.wte.weight", "position_embd.weight": "transformer.wpe.weight",
             "output_norm.weight": "transformer.ln_f.weight", "output_norm.bias": "transformer.ln_f.bias"}
    per = {"attn_norm": "ln_1", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_norm": "ln_2",
           "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}
    with torch.no_grad():
        for t in r.tensors:
            x = quants.dequantize(np.array(t.data), t.tensor_type).astype(np.float32)
            if t.name in names:
                key = names[t.name]
            else:
                _, l, mod, kind = t.name.split(".")
                key = f"transformer.h.{l}.{per[mod]}.{kind}"
            w = torch.from_numpy(np.ascontiguousarray(x))
            if key.endswith(".weight") and any(s in key for s in ("c_attn", "c_proj", "c_fc")):
                w = w.T  # Conv1D [in, out]
            sd[key].copy_(w.reshape(sd[key].shape))
        m.lm_head.weight = m.transformer.wte.weight


# ---- llama.cpp

def llama(path, lora=None, n_ctx=64):
    from llama_cpp import Llama
    kw = dict(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, n_threads=2, seed=0, verbose=False,
              type_k=0, type_v=0, flash_attn=False)  # F32 KV cache: no fp16 rounding of K and V
    if lora:
        kw.update(lora_path=lora, lora_scale=1.0)
    return Llama(**kw)


def llama_logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float64)


def llama_greedy(llm, ids, n):
    out = list(ids)
    for _ in range(n):
        out.append(int(np.argmax(llama_logits(llm, out)[-1])))
    return out[len(ids):]


def margins(logits):
    s = np.sort(logits, axis=1)
    return s[:, -1] - s[:, -2]


# ---- gguf-py's view of the files

def check_reader(path, typ, cfg, vocab_size):
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields
    def val(k):
        return f[k].contents()
    want = {"general.architecture": "gpt2", "general.type": "model", "gpt2.block_count": cfg["L"],
            "gpt2.embedding_length": cfg["C"], "gpt2.feed_forward_length": 4 * cfg["C"],
            "gpt2.attention.head_count": cfg["NH"], "gpt2.context_length": cfg["T"],
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.bos_token_id": 50256,
            "tokenizer.ggml.eos_token_id": 50256, "general.file_type": {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}[typ]}
    for k, v in want.items():
        assert val(k) == v, f"{path}: {k} = {val(k)!r}, want {v!r}"
    U32, STR, ARR, I32, F32 = (gguf.GGUFValueType.UINT32, gguf.GGUFValueType.STRING, gguf.GGUFValueType.ARRAY,
                               gguf.GGUFValueType.INT32, gguf.GGUFValueType.FLOAT32)
    types = {"gpt2.block_count": [U32], "gpt2.attention.layer_norm_epsilon": [F32], "tokenizer.ggml.tokens": [ARR, STR],
             "tokenizer.ggml.token_type": [ARR, I32], "tokenizer.ggml.merges": [ARR, STR], "general.name": [STR]}
    for k, v in types.items():
        assert f[k].types == v, f"{path}: {k} has types {f[k].types}, want {v}"
    assert abs(val("gpt2.attention.layer_norm_epsilon") - 1e-5) < 1e-12
    toks = val("tokenizer.ggml.tokens")
    assert len(toks) == vocab_size and toks[50256] == "<|endoftext|>" and toks[220] == "\u0120"
    tt = val("tokenizer.ggml.token_type")
    assert tt[50256] == 3 and all(x == 1 for x in tt[:50256])
    assert len(val("tokenizer.ggml.merges")) == 50000 and val("tokenizer.ggml.merges")[0] == "\u0120 t"
    wtype = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0"}[typ]
    names = {t.name: t for t in r.tensors}
    assert len(names) == 4 + 12 * cfg["L"] and "output.weight" not in names
    for n, t in names.items():
        two_d = n.endswith(".weight") and ("embd" in n or any(s in n for s in ("qkv", "output.", "ffn_up", "ffn_down")))
        want_t = wtype if two_d and n != "position_embd.weight" else "F32"
        assert t.tensor_type.name == want_t, f"{path}: {n} is {t.tensor_type.name}, want {want_t}"
    C = cfg["C"]
    shapes = {"token_embd.weight": [C, vocab_size], "position_embd.weight": [C, cfg["T"]], "blk.0.attn_qkv.weight": [C, 3 * C],
              "blk.0.attn_qkv.bias": [3 * C], "blk.0.attn_output.weight": [C, C], "blk.0.ffn_up.weight": [C, 4 * C],
              "blk.0.ffn_down.weight": [4 * C, C], "output_norm.bias": [C]}
    for n, s in shapes.items():
        assert [int(x) for x in names[n].shape] == s, f"{path}: {n} shape {names[n].shape}, want {s}"
    return r


def check_q8_identical(f32_path, q8_path):
    import gguf
    from gguf import quants
    a = {t.name: t for t in gguf.GGUFReader(f32_path).tensors}
    n = 0
    for t in gguf.GGUFReader(q8_path).tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.Q8_0:
            q = quants.quantize(np.array(a[t.name].data), gguf.GGMLQuantizationType.Q8_0)
            assert np.array_equal(q.view(np.uint8).ravel(), np.array(t.data).view(np.uint8).ravel()), f"{q8_path}: {t.name} differs from gguf-py"
            n += 1
    return n


def q8_crafted():
    """A tensor with what the rounding rules are about: exact .5 ties, an all-zero block, a block of
    one value, subnormal-scale and large values, random blocks; and gguf-py's Q8_0 bytes for it."""
    from gguf import quants, GGMLQuantizationType
    rng = np.random.default_rng(33)
    blocks = [np.zeros(32), np.full(32, -1.5), (np.arange(32) - 15.5) * (127 / 15.5) / 127 * 2.54,
              np.linspace(-1, 1, 32) * 1e-6, np.linspace(-3e4, 6e4, 32)]
    t = np.arange(32, dtype=np.float64) - 16
    t[0] = 127.0  # amax 127 -> d = 1: every x.5 value is a tie
    t[1:] = np.arange(31) * 0.5 - 7.25 + 0.25
    blocks.append(t)
    for _ in range(10):
        blocks.append(rng.standard_normal(32) * 10.0 ** rng.uniform(-4, 2))
    x = np.concatenate(blocks).astype(np.float32)
    return x, quants.quantize(x.reshape(1, -1), GGMLQuantizationType.Q8_0).view(np.uint8).ravel()


# ---- the model checks

def check_model(conv, work, desc, cfg, report, keep, model_args=None):
    """desc: a size descriptor (with --seed SEED) or, with model_args, a name for those convert args."""
    model_args = model_args or ["--model", desc, "--seed", str(SEED)]
    hf = os.path.join(work, f"{desc}_hf")
    run([conv, *model_args, "--out", hf])
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(hf)
    ids = tok(PROMPT)["input_ids"]
    stock = hf_model(hf)
    ref_stock = hf_logits(stock, ids)
    greedy_hf = hf_greedy(stock, ids, N_GREEDY)
    out = {}
    paths = {}
    for typ in TYPES:
        p = os.path.join(work, f"{desc}_{typ}.gguf")
        run([conv, *model_args, "--out", p, "--gguf-type", typ])
        paths[typ] = p
        check_reader(p, typ, cfg, 50257)
        same = hf_model(hf, gelu=True)
        load_gguf_weights(same, p)
        ref_same = hf_logits(same, ids)
        llm = llama(p)
        ll_ids = llm.tokenize(PROMPT.encode(), add_bos=False, special=False)
        assert ll_ids == ids, f"{p}: llama.cpp tokenizes the prompt as {ll_ids[:10]}..., transformers as {ids[:10]}..."
        got = llama_logits(llm, ids)
        r_stock, r_same, r_rms = rel(got, ref_stock), rel(got, ref_same), rel_rms(got, ref_stock)
        greedy_ll = llama_greedy(llm, ids, N_GREEDY)
        # greedy: must agree up to the first step whose margin (transformers') is within the tolerance
        seq = list(ids)
        agree, decided = True, 0
        with torch.no_grad():
            for k in range(N_GREEDY):
                lg = stock(torch.tensor([seq])).logits[0, -1].numpy()
                s = np.sort(lg)
                if s[-1] - s[-2] <= 2 * TOL_STOCK[typ] * np.max(np.abs(ref_stock)):
                    break
                decided += 1
                if greedy_ll[k] != greedy_hf[k]:
                    agree = False
                seq.append(greedy_hf[k])
        text = llm.detokenize(greedy_ll).decode("utf-8", "replace")
        out[typ] = dict(rel_vs_transformers=r_stock, rms_rel_vs_transformers=r_rms, rel_vs_same_weights_ggml_gelu=r_same, tol_stock=TOL_STOCK[typ],
                        tol_same=TOL_SAME[typ], greedy_equal=greedy_ll == greedy_hf, greedy_decided_steps=decided,
                        greedy_llama=greedy_ll, greedy_transformers=greedy_hf, greedy_text_llama=text, sha256=sha256(p),
                        bytes=os.path.getsize(p))
        print(f"{desc} {typ:5s} llama.cpp vs transformers {r_stock:.2e} (tol {TOL_STOCK[typ]:.0e}), vs same weights + ggml GELU "
              f"{r_same:.2e} (tol {TOL_SAME[typ]:.0e}), rms {r_rms:.1e}; greedy {'equal' if greedy_ll == greedy_hf else 'differs'} "
              f"({decided} of {N_GREEDY} steps decided by the margin): {text!r}")
        assert r_stock <= TOL_STOCK[typ] and r_same <= TOL_SAME[typ], f"{p}: logits outside the tolerance"
        assert agree, f"{p}: greedy continuation differs where the margin decides it"
        if keep is not None:
            keep[typ] = dict(logits=got, ids=ids)
        del llm
    out["q8_0_tensors_identical_to_gguf_py"] = check_q8_identical(paths["f32"], paths["q8_0"])
    report[desc] = dict(prompt_ids=ids, **out)
    return hf, ids, paths


def check_lora(conv, work, hf, ids, report, write_ref):
    """A PEFT adapter (all of GPT-2's Conv1D layers, random non-zero B) exported both ways."""
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(5)
    base = hf_model(hf)
    pm = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj", "c_fc"], fan_in_fan_out=True,
                                         lora_dropout=0.0, init_lora_weights=True))
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn_like(p) * 0.05)
    # (relative to the repository, and the base given as `tiny`, so that the suite's convert run
    # writes the same bytes: general.* names both, by their names, lora_tiny and tiny. The
    # lora_f32.gguf llama.cpp ran named the adapter by its path, test/ref/gguf/lora_tiny, in
    # general.description; files.sha256 has the hash of the file with the name, which differs from
    # it in that string alone: the same tensors, the same data.)
    adir = os.path.relpath(os.path.join(REF, "lora_tiny")) if write_ref else os.path.join(work, "lora_tiny")
    pm.save_pretrained(adir)
    if os.path.exists(os.path.join(adir, "README.md")):
        os.remove(os.path.join(adir, "README.md"))  # PEFT's model card template
    with open(os.path.join(adir, "adapter_config.json")) as f:
        acfg = json.load(f)
    acfg["base_model_name_or_path"] = "tiny"  # (not the temporary directory) convert --model tiny --seed 11
    acfg["target_modules"] = sorted(acfg["target_modules"])  # (a set in PEFT: any order)
    with open(os.path.join(adir, "adapter_config.json"), "w") as f:
        json.dump(acfg, f, indent=2, sort_keys=True)
    merged = pm.merge_and_unload()
    ref_merged = hf_logits(merged, ids)
    lora_p, merged_p = os.path.join(work, "lora_f32.gguf"), os.path.join(work, "merged_f32.gguf")
    base_p = os.path.join(work, "tiny_f32.gguf")
    base_args = ["--model", "tiny", "--seed", str(SEED)]
    run([conv, *base_args, "--adapter", adir, "--to", "gguf-lora", "--gguf-type", "f32", "--out", lora_p])
    run([conv, *base_args, "--adapter", adir, "--gguf-type", "f32", "--out", merged_p])
    import gguf
    r = gguf.GGUFReader(lora_p)
    assert r.fields["general.type"].contents() == "adapter" and r.fields["adapter.type"].contents() == "lora"
    assert r.fields["adapter.lora.alpha"].contents() == 8.0
    assert len(r.tensors) == 2 * 4 * 2 and all(t.name.endswith((".lora_a", ".lora_b")) for t in r.tensors)
    with_lora = llama_logits(llama(base_p, lora=lora_p), ids)
    on_merged = llama_logits(llama(merged_p), ids)
    r_ll, r_peft = rel(with_lora, on_merged), rel(with_lora, ref_merged)
    print(f"LoRA: llama.cpp base + --lora vs llama.cpp merged {r_ll:.2e} (tol {TOL_LORA:.0e}); vs PEFT merge_and_unload {r_peft:.2e}")
    assert r_ll <= TOL_LORA and r_peft <= TOL_STOCK["f32"]
    report["lora"] = dict(rel_lora_vs_merged_llama=r_ll, rel_lora_vs_peft_merged=r_peft, tol=TOL_LORA, sha256=sha256(lora_p))
    for typ in ("f16", "q8_0"):  # the adapter itself rounded (q8_0: lora_b of rank 4 falls back to F16)
        p = os.path.join(work, f"lora_{typ}.gguf")
        run([conv, *base_args, "--adapter", adir, "--to", "gguf-lora", "--gguf-type", typ, "--out", p])
        r_t = rel(llama_logits(llama(base_p, lora=p), ids), on_merged)
        print(f"LoRA {typ} adapter: llama.cpp base + --lora vs llama.cpp merged (f32) {r_t:.2e} (tol {TOL_SAME[typ]:.0e})")
        assert r_t <= TOL_SAME[typ]
        report["lora"][f"rel_{typ}_adapter_vs_merged_llama"] = r_t
    return with_lora


def write_refs(keep, lora_logits, report):
    from safetensors.numpy import save_file
    os.makedirs(REF, exist_ok=True)
    V = 50257
    cols = np.arange(0, V, COL_STRIDE)
    t = {"ids": np.array(keep["f32"]["ids"], dtype=np.int32), "cols": cols.astype(np.int32)}
    sets = dict((k, v["logits"]) for k, v in keep.items())
    sets["lora"] = lora_logits
    for k, lg in sets.items():
        t[f"{k}_logits"] = np.ascontiguousarray(lg[:, cols], dtype=np.float32)  # (C order: save_file writes the buffer)
        t[f"{k}_argmax"] = np.argmax(lg, axis=1).astype(np.int32)
        t[f"{k}_margin"] = margins(lg).astype(np.float32)
        t[f"{k}_maxabs"] = np.max(np.abs(lg), axis=1).astype(np.float32)
    x, q = q8_crafted()
    t["q8_input"], t["q8_expect"] = x, q
    save_file(t, os.path.join(REF, "llama_ref.safetensors"))
    with open(os.path.join(REF, "files.sha256"), "w") as f:
        for typ in TYPES:
            f.write(f"{report['tiny'][typ]['sha256']}  tiny_{typ}.gguf\n")
        f.write(f"{report['lora']['sha256']}  lora_f32.gguf\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--convert", default=os.path.join(REPO, "build", "cpu", "bin", "convert"))
    ap.add_argument("--skip-124m", action="store_true")
    ap.add_argument("--write-ref", action="store_true")
    ap.add_argument("--trained", metavar="DIR", help="also a trained model directory, e.g. out/lora_tiny/base of `make quickstart`")
    ap.add_argument("--trained-adapter", metavar="DIR", help="... and its PEFT adapter merged into it (out/lora_tiny/lora)")
    a = ap.parse_args()
    conv = os.path.abspath(a.convert)
    os.chdir(REPO)
    report, keep = {}, {}
    with tempfile.TemporaryDirectory() as work:
        hf, ids, _ = check_model(conv, work, "tiny", dict(L=2, C=64, NH=4, T=256), report, keep)
        lora_logits = check_lora(conv, work, hf, ids, report, a.write_ref)
        if a.trained:
            import json as _j
            with open(os.path.join(a.trained, "config.json")) as f:
                c = _j.load(f)
            tcfg = dict(L=c["n_layer"], C=c["n_embd"], NH=c["n_head"], T=c["n_positions"])
            check_model(conv, work, "trained", tcfg, report, None, ["--model", os.path.abspath(a.trained)])
            if a.trained_adapter:
                check_model(conv, work, "trained_merged", tcfg, report, None,
                            ["--model", os.path.abspath(a.trained), "--adapter", os.path.abspath(a.trained_adapter)])
        if not a.skip_124m:
            check_model(conv, work, "d12", dict(L=12, C=768, NH=12, T=1024), report, None)
        x, q = q8_crafted()
        import gguf.quants as gq
        report["q8_crafted_blocks"] = len(x) // 32
        if a.write_ref:
            write_refs(keep, lora_logits, report)
    import llama_cpp, gguf
    from importlib.metadata import version
    report["versions"] = dict(llama_cpp_python=llama_cpp.__version__, gguf=version("gguf"),
                              torch=torch.__version__, transformers=__import__("transformers").__version__,
                              peft=__import__("peft").__version__)
    if a.write_ref:
        old = os.path.join(REF, "report.json")
        if a.skip_124m and os.path.exists(old):  # keep the last 124M figures
            with open(old) as f:
                prev = json.load(f)
            for k in ("d12", "trained", "trained_merged"):
                if k in prev and k not in report:
                    report[k] = prev[k]
        with open(os.path.join(REF, "report.json"), "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
    print("all checks passed")


if __name__ == "__main__":
    main()
