#!/usr/bin/env python3
"""Seed corpus of the GGUF fuzz harness (test/fuzz/fuzz_gguf.c): small valid GGUF files written
with the standard library alone, laid out as gguf-py writes them (docs/FORMATS.md, "GGUF"):
a bare container, GPT-2 models (F32; F16 / BF16 / Q8_0 matmul weights; with output.weight) and a
LoRA adapter. Run from the repository root: python3 dev/gen_gguf_fuzz_seeds.py"""
import os, struct

OUT = "test/fuzz/corpus/gguf"
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, val):
    out = s(key) + struct.pack("<I", typ)
    if typ == STR:
        return out + s(val)
    if typ == U32:
        return out + struct.pack("<I", val)
    if typ == F32:
        return out + struct.pack("<f", val)
    if typ == BOOL:
        return out + bytes([val])
    et, items = val
    out += struct.pack("<IQ", et, len(items))
    return out + b"".join(s(i) if et == STR else struct.pack("<i", i) for i in items)


def f16(x):
    return struct.pack("<e", x)


def encode(typ, vals):
    if typ == 0:
        return b"".join(struct.pack("<f", v) for v in vals)
    if typ == 1:
        return b"".join(f16(v) for v in vals)
    if typ == 30:
        return b"".join(struct.pack("<f", v)[2:] for v in vals)
    out = b""
    for b in range(0, len(vals), 32):  # Q8_0: any valid block will do for a seed
        blk = vals[b:b + 32]
        d = max(abs(v) for v in blk) / 127 or 0.0
        out += f16(d) + bytes((round(v / d) if d else 0) & 0xFF for v in blk)
    return out


def gguf(kvs, tensors):
    """tensors: (name, ne list (ggml order), type, values)"""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    infos, data = b"", b""
    for name, ne, typ, vals in tensors:
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", typ, len(data))
        data += encode(typ, vals)
        data += bytes(-len(data) % 32)
    body = head + infos
    return body + bytes(-len(body) % 32) + data


def model(C, NH, V, T, L, wtype, output=False):
    kvs = [kv("general.architecture", STR, "gpt2"), kv("general.type", STR, "model"), kv("general.name", STR, "seed"),
           kv("gpt2.context_length", U32, T), kv("gpt2.embedding_length", U32, C), kv("gpt2.feed_forward_length", U32, 4 * C),
           kv("gpt2.block_count", U32, L), kv("gpt2.attention.head_count", U32, NH),
           kv("gpt2.attention.layer_norm_epsilon", F32, 1e-5), kv("tokenizer.ggml.model", STR, "gpt2"),
           kv("tokenizer.ggml.tokens", ARR, (STR, [chr(97 + i) for i in range(V)])),
           kv("tokenizer.ggml.token_type", ARR, (I32, [1] * V)), kv("tokenizer.ggml.add_bos_token", BOOL, 0)]
    val = lambda n, k: [((i * 7 + k) % 13 - 6) / 10 for i in range(n)]
    ts = [("token_embd.weight", [C, V], wtype, val(C * V, 1)), ("position_embd.weight", [C, T], 0, val(C * T, 2))]
    for l in range(L):
        for name, ne, w in (("attn_norm.weight", [C], 0), ("attn_norm.bias", [C], 0), ("attn_qkv.weight", [C, 3 * C], wtype),
                            ("attn_qkv.bias", [3 * C], 0), ("attn_output.weight", [C, C], wtype), ("attn_output.bias", [C], 0),
                            ("ffn_norm.weight", [C], 0), ("ffn_norm.bias", [C], 0), ("ffn_up.weight", [C, 4 * C], wtype),
                            ("ffn_up.bias", [4 * C], 0), ("ffn_down.weight", [4 * C, C], wtype), ("ffn_down.bias", [C], 0)):
            n = 1
            for x in ne:
                n *= x
            ts.append((f"blk.{l}.{name}", ne, w, val(n, l + 3)))
    ts += [("output_norm.weight", [C], 0, val(C, 4)), ("output_norm.bias", [C], 0, val(C, 5))]
    if output:
        ts.append(("output.weight", [C, V], wtype, val(C * V, 1)))
    return gguf(kvs, ts)


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = [
        gguf([kv("general.architecture", STR, "x"), kv("general.alignment", U32, 32), kv("a.list", ARR, (I32, [1, 2]))],
             [("a", [4], 0, [1.0, 2.0, 3.0, 4.0]), ("b", [4, 2], 1, [0.5] * 8)]),
        model(8, 2, 8, 4, 1, 0),
        model(8, 2, 8, 4, 1, 1, output=True),
        model(8, 2, 8, 4, 2, 30),
        model(32, 2, 4, 2, 1, 8),
        gguf([kv("general.architecture", STR, "gpt2"), kv("general.type", STR, "adapter"), kv("adapter.type", STR, "lora"),
              kv("adapter.lora.alpha", F32, 8.0)],
             [("blk.0.attn_qkv.weight.lora_a", [8, 2], 0, [0.1] * 16), ("blk.0.attn_qkv.weight.lora_b", [2, 24], 0, [0.2] * 48)]),
    ]
    for i, b in enumerate(seeds):
        assert len(b) <= 32768, f"seed {i}: {len(b)} bytes, over the harness' max_len"
        with open(os.path.join(OUT, f"seed_{i:02d}"), "wb") as f:
            f.write(b)
    print(f"{len(seeds)} seeds in {OUT}")


if __name__ == "__main__":
    main()
