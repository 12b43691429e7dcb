#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses (test/fuzz/corpus/NAME/): small valid inputs of
every format, so that the fuzzers start from files the parsers accept and mutate from there.
Plain Python (struct, json); run from the repository root: python3 dev/gen_fuzz_seeds.py.
Formats: llm.c model .bin (v3 fp32 / v5 bf16), safetensors, Hugging Face config.json, llm.c token
shards with loss masks, checkpoint state files with their DONE manifest, PEFT adapters (the small
ones of test/ref/lora_tiny, and a q/v split as train_lora writes it), GPT-2 vocabularies in the three layouts, tokenizer text."""
import json, os, struct, sys

OUT = "test/fuzz/corpus"


def put(name, idx, data):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed_%02d" % idx), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, meta=None):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    hdr, off, data = {}, 0, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def f32(n, scale=0.01):
    return struct.pack("<%df" % n, *[scale * ((i * 37) % 11 - 5) for i in range(n)])


def crc32c(data):
    t = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    c = 0xFFFFFFFF
    for x in data:
        c = (c >> 8) ^ t[(c ^ x) & 0xFF]
    return c ^ 0xFFFFFFFF


# ---- a GPT-2 with L=1, C=4, NH=1, vocab 5 (padded 128), 3 positions
L, C, V, VP, T = 1, 4, 5, 128, 3
HF = [("wte.weight", [V, C]), ("wpe.weight", [T, C])]
for l in range(L):
    p = "h.%d." % l
    HF += [(p + "ln_1.weight", [C]), (p + "ln_1.bias", [C]), (p + "attn.c_attn.weight", [C, 3 * C]),
           (p + "attn.c_attn.bias", [3 * C]), (p + "attn.c_proj.weight", [C, C]), (p + "attn.c_proj.bias", [C]),
           (p + "ln_2.weight", [C]), (p + "ln_2.bias", [C]), (p + "mlp.c_fc.weight", [C, 4 * C]),
           (p + "mlp.c_fc.bias", [4 * C]), (p + "mlp.c_proj.weight", [4 * C, C]), (p + "mlp.c_proj.bias", [C])]
HF += [("ln_f.weight", [C]), ("ln_f.bias", [C])]


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def llmc_model(version):
    total = VP * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    hdr = struct.pack("<256i", *([20240326, version, T, V, L, 1, C, VP] + [0] * 248))
    if version == 3:
        return hdr + f32(total)
    return hdr + struct.pack("<%dH" % total, *[(0x3C00 + i) & 0xFFFF for i in range(total)])


def hf_config(**kw):
    c = {"model_type": "gpt2", "n_embd": C, "n_layer": L, "n_head": 1, "vocab_size": V, "n_positions": T,
         "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "n_inner": None, "tie_word_embeddings": True}
    c.update(kw)
    return json.dumps(c, indent=2)


def main():
    st_model = safetensors([(n, "F32", s, f32(numel(s))) for n, s in HF], {"format": "pt"})
    st_model_bf16 = safetensors([("transformer." + n, "BF16", s, bytes(2 * numel(s))) for n, s in HF])
    # ---- model: llm.c v3 / v5, safetensors with and without config.json, an index
    put("model", 0, llmc_model(3))
    put("model", 1, llmc_model(5))
    put("model", 2, st_model)
    put("model", 3, st_model_bf16 + b"\n==config.json==\n" + hf_config().encode())
    put("model", 4, json.dumps({"metadata": {}, "weight_map": {n: "model.bin" for n, _ in HF}}))
    # ---- safetensors: every dtype, metadata, empty and 0-d tensors
    dts = [("F32", 4), ("BF16", 2), ("F16", 2), ("F64", 8), ("I64", 8), ("I32", 4), ("I16", 2), ("I8", 1), ("U8", 1), ("BOOL", 1)]
    put("safetensors", 0, safetensors([("t_" + d, d, [2, 3], bytes(range(6 * s))) for d, s in dts], {"format": "pt", "k": "v"}))
    put("safetensors", 1, safetensors([("scalar", "F32", [], f32(1)), ("empty", "I32", [0, 5], b"")]))
    put("safetensors", 2, safetensors([]))
    put("safetensors", 3, st_model)
    # ---- JSON documents
    put("json", 0, hf_config())
    put("json", 1, '{"a": [1, -2.5e-3, true, false, null, "x\\u00e9\\ud83d\\ude00\\n"], "b": {"c": {}}, "d": []}')
    put("json", 2, json.dumps({"weight_map": {"wte.weight": "a.safetensors"}, "metadata": {"total_size": 12}}))
    put("json", 3, open("test/ref/lora_tiny/c_attn/adapter_config.json").read())
    put("json", 4, "[18446744073709551615, -9223372036854775808, 1e308, 0.1]")
    # ---- config.json
    put("hf_config", 0, open("test/ref/gpt2_tiny/config.json").read())
    put("hf_config", 1, hf_config(n_ctx=T, layer_norm_epsilon=None, activation_function="gelu_pytorch_tanh"))
    put("hf_config", 2, hf_config(n_inner=4 * C, scale_attn_weights=True, tie_word_embeddings=False))
    # ---- token shards (+ masks): 4 settings bytes, shard, separator, mask
    for i, (n, cfg, masked) in enumerate([(40, b"\x00\x03\x00\x00", False), (70, b"\x01\x02\x05\x03", True), (200, b"\x03\x0f\x03\x07", True)]):
        shard = struct.pack("<256i", *([20240520, 1, n] + [0] * 253)) + struct.pack("<%dH" % n, *[(7 * k) % 300 for k in range(n)])
        data = cfg + shard
        if masked:
            data += b"\n==mask==\n" + struct.pack("<256i", *([20261122, 1, n] + [0] * 253)) + bytes((k // 3) % 2 for k in range(n))
        put("shard", i, data)
    # a packed shard (--pack 6: header fields 3 and 4, a version 2 mask whose bit 1 starts records),
    # read with B=2, T=6
    n, starts = 6 * 8 + 1, {0, 3, 6, 12, 14, 18, 24, 25, 30, 36, 40, 42}
    shard = struct.pack("<256i", *([20240520, 1, n, 6, 1] + [0] * 251)) + struct.pack("<%dH" % n, *[(11 * k) % 300 for k in range(n)])
    mask = bytes((2 if k in starts else 0) | (k % 4 != 1) for k in range(n))
    put("shard", 3, b"\x01\x05\x00\x00" + shard + b"\n==mask==\n" + struct.pack("<256i", *([20261122, 2, n, 6, 1] + [0] * 251)) + mask)
    # shards as data/prepare writes them now (docs/FORMATS.md): field 5 has a mask, 6-7 shard 1 of
    # 1, 8 the tokens' CRC-32C, 9 the split's id; the mask repeats fields 3-9, its CRC-32C in 10.
    # A stream read with B=1, T=8, and packed windows of 8 read with B=2, T=8
    s32 = lambda x: x - (1 << 32) if x >= 1 << 31 else x
    for idx, (n, W, cfg) in [(4, (41, 0, b"\x00\x07\x00\x00")), (5, (33, 8, b"\x01\x07\x00\x00"))]:
        tok = struct.pack("<%dH" % n, *[(13 * k + 5) % 300 for k in range(n)])
        mask = bytes([0] + [(2 if W and k % W == 0 and k < n - 1 else 0) | (k % 3 != 0) for k in range(1, n)])
        if W: mask = bytes([2]) + mask[1:]
        h = [20240520, 1, n, W, int(W > 0), 1, 0, 1, s32(crc32c(tok)), s32(0x1234567)]
        mh = [20261122, 2 if W else 1, n] + h[3:10] + [s32(crc32c(mask))]
        put("shard", idx, cfg + struct.pack("<256i", *(h + [0] * 246)) + tok + b"\n==mask==\n" + struct.pack("<256i", *(mh + [0] * 245)) + mask)
    # ---- checkpoint state: manifest + state files of step 1 (1 rank; 2 ranks with ZeRO-1)
    def state(world, rank, total, zero, master):
        shard_n = (total + world - 1) // world
        begin = 0 if world == 1 or zero == 0 else rank * shard_n
        end = total if world == 1 or zero == 0 else min((rank + 1) * shard_n, total)
        h = [20261123, 1, world, rank, master, 1, 1, 99, 0, 0, 2, begin, end, total, 0, 2, 4, 1, 0, zero, 1337,
             2 * 4 * world, 0] + [0] * 105
        return struct.pack("<128q", *h) + f32((end - begin) * (3 if master else 2))

    def manifest(states):
        files = [{"name": "model_00000001.bin", "bytes": 1, "crc32c": "%08x" % crc32c(b"m")}]
        files += [{"name": "state_00000001_%05d.bin" % r, "bytes": len(s), "crc32c": "%08x" % crc32c(s)} for r, s in enumerate(states)]
        return json.dumps({"format": "llmc-ft checkpoint", "version": 1, "step": 1, "world": len(states), "files": files}, indent=2)

    one = [state(1, 0, 10, 0, 0)]
    two = [state(2, 0, 10, 1, 1), state(2, 1, 10, 1, 1)]
    put("state", 0, manifest(one).encode() + b"\n==state==\n" + one[0])
    put("state", 1, manifest(two).encode() + b"\n==state==\n" + two[0] + b"\n==state==\n" + two[1])
    # ---- PEFT adapters of the tiny model
    for i, name in enumerate(["c_attn", "qv", "bias_lnf", "layers", "bias_all"]):
        d = "test/ref/lora_tiny/" + name
        put("peft", i, open(d + "/adapter_config.json", "rb").read() + b"\n==adapter_model.safetensors==\n" +
            open(d + "/adapter_model.safetensors", "rb").read())
    # a q/v split as train_lora writes it: rank 2 per block stacked to 4, the llmc_qkv_split
    # metadata, B zero outside the q and v blocks (the k rows, and each block's other columns)
    qv_cfg = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["c_attn"], "bias": "none",
              "rank_pattern": {"attn.c_attn": 4}, "alpha_pattern": {"attn.c_attn": 8}}
    qv = []
    for l in range(2):
        k = "base_model.model.transformer.h.%d.attn.c_attn." % l
        b = [0.01 * ((o + j) % 7 - 3) if o // 64 == (0, 2)[j // 2] else 0.0 for o in range(192) for j in range(4)]
        qv += [(k + "lora_A.weight", "F32", [4, 64], f32(4 * 64)), (k + "lora_B.weight", "F32", [192, 4], struct.pack("<768f", *b))]
    put("peft", 5, json.dumps(qv_cfg, indent=2).encode() + b"\n==adapter_model.safetensors==\n" +
        safetensors(qv, {"format": "pt", "llmc_qkv_split": "q,v"}))
    # exclude_modules, and rank_pattern / alpha_pattern keys read as regular expressions
    for i, name in enumerate(["exclude", "patterns"]):
        d = "test/ref/lora_tiny/" + name
        put("peft", 6 + i, open(d + "/adapter_config.json", "rb").read() + b"\n==adapter_model.safetensors==\n" +
            open(d + "/adapter_model.safetensors", "rb").read())
    # ---- vocabularies: the 256 byte tokens (GPT-2's byte-to-unicode alphabet), a few merges,
    # <|endoftext|>; as encoder.json + vocab.bpe, vocab.json + merges.txt, tokenizer.json
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    alpha = {b: chr(c) for b, c in zip(bs, cs)}
    enc = {alpha[b]: b for b in range(256)}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("\u0120", "t"), ("\u0120t", "he"), ("o", "r")]
    for a, b in merges:
        enc[a + b] = len(enc)
    enc["<|endoftext|>"] = len(enc)
    bpe = "#version: 0.2\n" + "".join("%s %s\n" % m for m in merges)
    put("vocab", 0, b"\x00" + json.dumps(enc).encode() + b"\n==merges==\n" + bpe.encode())
    put("vocab", 1, b"\x01" + json.dumps(enc).encode() + b"\n==merges==\n" + bpe.encode())
    tj = {"model": {"type": "BPE", "vocab": enc, "merges": ["%s %s" % m for m in merges]},
          "added_tokens": [{"id": enc["<|endoftext|>"], "content": "<|endoftext|>", "special": True}]}
    put("vocab", 2, b"\x02" + json.dumps(tj).encode())
    tj["model"]["merges"] = [list(m) for m in merges]
    put("vocab", 3, b"\x02" + json.dumps(tj).encode())
    # ---- tokenizer text
    texts = open("test/ref/tok_stress.txt", "rb").read().split(b"#case ")
    for i, t in enumerate(texts[1:9]):
        put("tokenizer", i, bytes([i & 1]) + t.split(b"\n", 1)[-1][:400])
    put("tokenizer", 9, b"\x01Hello<|endoftext|> world's   \t\n\n  123 4567 !!?? \xff\xfe\xe2\x82")


if __name__ == "__main__":
    if not os.path.isdir("test/fuzz"):
        sys.exit("run from the repository root")
    main()
