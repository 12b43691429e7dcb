#!/usr/bin/env python3
"""Reference token ids for test/test_tokenizer.c, produced by tiktoken (OpenAI's tokenizer
library), built offline from the SAME vocabulary files the C tokenizer reads (data/gpt2/), so
nothing is downloaded.

Writes:
  test/ref/tok_shakespeare.u16        ids of data/tinyshakespeare.txt (encode_ordinary), uint16 LE
  test/ref/tok_stress.txt             Unicode stress cases: "#case <nbytes> <ordinary|special>\n<bytes>\n"
  test/ref/tok_stress_ids.txt         per case: "<count> id id ..."
  test/ref/prepare_sft.jsonl          a small JSONL input for test/test_prepare.sh, and
  test/ref/prepare_sft_expected.txt   the tokens and loss mask data/prepare must produce for it
                                      (layout rules of data/README.md applied to tiktoken's ids)
  test/ref/tok_unicode_classes.txt    how tiktoken's pattern classifies every code point
                                      (letter 1 / number 2 / whitespace 4 / other 0), as runs
                                      "<first code point hex> <class>"; --no-probe skips it (3 min)
Run: /opt/refenv/bin/python dev/gen_tokenizer_ref.py [--no-probe]
"""
import json, os, struct, sys
import tiktoken

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF = os.path.join(ROOT, "test", "ref")
PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def gpt2_encoding():
    byte_decoder = {v: k for k, v in bytes_to_unicode().items()}
    with open(os.path.join(ROOT, "data", "gpt2", "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    ranks = {}
    for tok, i in encoder.items():
        if tok == "<|endoftext|>":
            continue
        ranks[bytes(byte_decoder[c] for c in tok)] = i
    return tiktoken.Encoding("gpt2_local", pat_str=PAT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": encoder["<|endoftext|>"]})


def stress_cases():
    """(text, allow_special) pairs. Written with escapes so the file is reproducible."""
    c = []
    add = lambda s, sp=False: c.append((s, sp))
    add("Hello world! How are you doing today?")
    add("Café naïve résumé coöperate jalapeño Ångström façade Øresund Straße ÉCOLE")
    add("e\u0301 a\u0300\u0301 n\u0303o Z\u0351\u0300\u0308a\u0362\u0321l\u0338g\u0322o combining: \u0301\u0302 x\u20dd")
    add("中文分词测试：我们今天去公园。日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다.")
    add("emoji 😀😃😄 👍🏽 👩‍👩‍👧‍👦 👨🏿‍💻 🏳️‍🌈 🇯🇵🇺🇸 ❤️ ✌🏻 1️⃣ #️⃣")
    add("Arabic: مرحبا بالعالم ١٢٣ ٤٥٦ Hebrew: שלום עולם Persian: ۱۲۳ Devanagari: नमस्ते दुनिया १२३ Thai: สวัสดีชาวโลก ๑๒๓")
    add("numbers 0123456789 1,234,567.89 3.14159 -42 +7 1e10 0x1F ² ³ ¹ ⁴ ½ ¾ ⅓ ⅞ Ⅰ Ⅱ Ⅻ ⅿ ① ⑳ ⓵ 𝟙𝟚 ٣ ໓ ༣ 〇 〡 𐄇")
    add("x²y³ H₂O 10⁻⁹ 2½ Ⅻo'clock 12ab34 ab12cd")
    add("spaces:  two   three    four\ttab\t\ttabs \t mixed\n\nnewlines\r\nCRLF\r\n\r\nend")
    add("nbsp:\u00a0x\u00a0\u00a0y \u00a0z ideographic:\u3000a\u3000\u3000b en\u2002em\u2003thin\u2009hair\u200ax narrow\u202fnnbsp math\u205fsp")
    add("line\u2028sep para\u2029sep nel\u0085x vt\u000bff\u000cx fs\u001cgs\u001drs\u001eus\u001fend ogham\u1680x zwsp\u200bx zwj\u200dx")
    add("   leading spaces and trailing spaces   ")
    add("\n\n\nstarts with newlines and ends with them\n\n")
    add(" ")
    add("\t")
    add("a")
    add("  \n  \t \u3000 \u00a0")
    add("it's don't we're they've I'm you'll he'd it'S DON'T WE'RE THEY'VE I'M YOU'LL HE'D 'sup 's 't 're 've 'm 'll 'd ''s '''")
    add("apostrophes: it’s don’t ‘quoted’ ‛x‛ ʼokina ′prime″ `back` it\u2019s rock'n'roll o'clock 'tis ma'am y'all")
    add("punct!!! ??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} <<< >>> /// \\\\\\ ||| ~~~ ;;; ::: ,,, ... !?!?")
    add("«guillemets» „Anführung“ “smart quotes” —em dash– …ellipsis · • ¶ § † ‡ © ® ™ € £ ¥ ₹ ₿ ¢")
    add("code: def f(x):\n    return x**2 + 1  # comment\n\tif (a && b || !c) { y = a[i] >> 2; }\n")
    add("url: https://example.com/path?q=1&r=two#frag email: someone@example.org path C:\\Users\\x\\file.txt")
    add("Mixed: abc123def 123abc abc-123 ABC_def snake_case camelCaseWord UPPER lower MiXeD")
    add("<|endoftext|> is not special here <|endoftext|>")
    add("special allowed: <|endoftext|>next doc<|endoftext|><|endoftext|> <|endoftext| <|end", True)
    add("<|endoftext|>", True)
    add("Greek: Αλφάβητο ελληνικά ΑΒΓΔ αβγδ Cyrillic: Привет мир Ёё Armenian: Բարեւ Georgian: გამარჯობა")
    add("Math: ∀x∈ℝ: x²≥0, ∑ᵢ aᵢ ≤ ∫f(x)dx ≈ π·r² ≠ ∞ √2 ∂ ∇ ⊗ ⊕ ℵ₀ 𝔸𝔹ℂ 𝒜 𝓍")
    add("Old scripts: 𐌰𐌱𐌲 𐎀𐎁 𓀀𓀁 ᚠᚢᚦ ꓐꓑ — Cherokee ᏣᎳᎩ — Vai ꕉꕊ — new in Unicode 16: \u1c89\u1c8a \U000105c0 \U00010d40\U00010d41 \U00016d40")
    add("Private use \ue000\uf8ff and noncharacters \ufdd0\ufffe\uffff and replacement \ufffd and BOM \ufeffx")
    add("tabs\tbetween\twords\t\t\tand\t \t spaces")
    add("a" * 3000)
    add("1234567890" * 200)
    add("!?" * 700)
    add(" " * 500 + "x" + "\n" * 300 + "y" + "\t " * 200)
    add("é" * 1000 + "中" * 500 + "😀" * 300)
    add(("The quick brown fox jumps over the lazy dog. " * 60).strip())
    add("antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious")
    add("Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ ！？ ｶﾀｶﾅ")
    add("ZWJ: a\u200db \u200c non-joiner \u2060 word-joiner \u180e mongolian-vs x\ufe0fy \u00adsoft-hyphen")
    add("Hangul jamo: \u1100\u1161\u11a8 precomposed 각 Kana: ｧｨｩ ㋐ ㌀")
    add("Z\u0308\u0308\u0308 \u0301leading-combining \u0903 Devanagari sign visarga")
    add("Subscripts ₀₁₂₃ superscripts ⁰¹²³⁴⁵⁶⁷⁸⁹ circled ①②③ parenthesized ⑴⑵ full stop ⒈⒉ roman ⅰⅱⅲ ↉")
    add("Mixed scripts: Tokyo東京2024年 Москва2025 القاهرة٢٠٢٦ Δx=5m")
    add("\r\n\r\n\r\n")
    add("x \n y \r\n z \t\n w")
    return c


EOT = 50256
SFT_RECORDS = [
    {"prompt": "Is the sky blue?\nAnswer:", "completion": " Yes, on a clear day."},
    {"text": "A plain document, trained on entirely.\n"},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Capital of France?"},
                  {"role": "assistant", "content": "Paris."},
                  {"role": "user", "content": "And of Japan? 日本"},
                  {"role": "assistant", "content": "Tokyo (東京)."}]},
    {"prompt": "Empty completion:", "completion": ""},
    {"prompt": "", "completion": "Only a completion <|endoftext|> with the marker as text."},
]


def record_tokens(enc, r):
    """One record's tokens and mask (plain template), its <|endoftext|> first (mask 0 here):
    prompt: mask 0, completion: mask 1; text: mask 1; chat: "Role:" mask 0, then " content\n"
    with mask 1 for the assistant, 0 otherwise. Segments are encoded separately."""
    t, m = [EOT], [0]
    def seg(text, k):
        ids = enc.encode_ordinary(text)
        t.extend(ids)
        m.extend([k] * len(ids))
    if "messages" in r:
        for msg in r["messages"]:
            seg({"system": "System:", "user": "User:", "assistant": "Assistant:"}[msg["role"]], 0)
            seg(" " + msg["content"] + "\n", 1 if msg["role"] == "assistant" else 0)
    elif "prompt" in r:
        seg(r["prompt"], 0)
        seg(r["completion"], 1)
    else:
        seg(r["text"], 1)
    return t, m


def sft_expected(enc):
    """data/prepare's documented layout: the records' tokens (record_tokens), each record's
    <|endoftext|> with the mask of the token before it (0 at the start); a final <|endoftext|>
    closes the last record."""
    toks, mask = [], []
    for r in SFT_RECORDS:
        t, m = record_tokens(enc, r)
        m[0] = mask[-1] if mask else 0
        toks += t
        mask += m
    mask.append(mask[-1])
    toks.append(EOT)
    return toks, mask


def unicode_probe(enc_unused):
    """Classify each code point the way tiktoken's compiled pattern does: with a vocabulary of
    the 256 bytes plus every byte prefix of "a"+c, "1"+c and "\\n"+c, a probe string becomes one
    token iff the pattern keeps it in one piece."""
    cps = [c for c in range(0x110000) if not (0xD800 <= c < 0xE000)]
    ranks = {bytes([b]): b for b in range(256)}
    for c in cps:
        u = chr(c).encode()
        for pre in (b"a", b"1", b"\n"):
            s = pre + u
            for k in range(2, len(s) + 1):
                if s[:k] not in ranks:
                    ranks[s[:k]] = len(ranks)
    enc = tiktoken.Encoding("probe", pat_str=PAT, mergeable_ranks=ranks, special_tokens={})
    L = enc.encode_ordinary_batch(["a" + chr(c) for c in cps])
    N = enc.encode_ordinary_batch(["1" + chr(c) for c in cps])
    S = enc.encode_ordinary_batch(["\n" + chr(c) for c in cps])
    cls = {}
    for i, c in enumerate(cps):
        cls[c] = (len(L[i]) == 1) * 1 + (len(N[i]) == 1) * 2 + (len(S[i]) == 1) * 4
    runs, prev = [], None
    for c in range(0x110000):
        k = cls.get(c, -1)  # -1: surrogates (not encodable, not tested)
        if k != prev:
            runs.append((c, k))
            prev = k
    return runs


def main():
    os.makedirs(REF, exist_ok=True)
    enc = gpt2_encoding()
    with open(os.path.join(ROOT, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        text = f.read()
    ids = enc.encode_ordinary(text)
    assert max(ids) < 65536
    with open(os.path.join(REF, "tok_shakespeare.u16"), "wb") as f:
        f.write(struct.pack("<%dH" % len(ids), *ids))
    print("shakespeare: %d tokens" % len(ids))

    cases = stress_cases()
    with open(os.path.join(REF, "tok_stress.txt"), "wb") as f, \
         open(os.path.join(REF, "tok_stress_ids.txt"), "w") as g:
        for s, sp in cases:
            b = s.encode("utf-8")
            f.write(b"#case %d %s\n" % (len(b), b"special" if sp else b"ordinary"))
            f.write(b + b"\n")
            t = enc.encode(s, allowed_special="all") if sp else enc.encode_ordinary(s)
            assert enc.decode_bytes(t) == b
            g.write("%d %s\n" % (len(t), " ".join(map(str, t))))
    print("stress: %d cases" % len(cases))

    with open(os.path.join(REF, "prepare_sft.jsonl"), "w", encoding="utf-8") as f:
        for i, r in enumerate(SFT_RECORDS):
            f.write(json.dumps(r, ensure_ascii=(i % 2 == 0)) + "\n")
            if i == 1:
                f.write("\n")  # a blank line is skipped
    toks, mask = sft_expected(enc)
    with open(os.path.join(REF, "prepare_sft_expected.txt"), "w") as f:
        f.write(" ".join(map(str, toks)) + "\n")
        f.write(" ".join(map(str, mask)) + "\n")
    print("sft: %d tokens, %d trained" % (len(toks), sum(mask)))

    if "--no-probe" not in sys.argv:
        runs = unicode_probe(enc)
        with open(os.path.join(REF, "tok_unicode_classes.txt"), "w") as f:
            f.write("# code point classes of tiktoken's GPT-2 pattern: <first hex> <class>; "
                    "1 letter 2 number 4 whitespace 0 other -1 untested (surrogates)\n")
            for c, k in runs:
                f.write("%x %d\n" % (c, k))
        print("unicode classes: %d runs" % len(runs))


if __name__ == "__main__":
    main()
