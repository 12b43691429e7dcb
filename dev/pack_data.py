#!/usr/bin/env python3
"""The data of the packing benchmarks (dev/bench_pack.sh on the CPU, the pack runs of
scripts/gpu_check.sh's train section on a GPU) and of its preference-tuning runs. Python standard
library only.

  python3 dev/pack_data.py records OUT.jsonl
      chat-style records from the bundled text: each speech of data/tinyshakespeare.txt as the
      assistant's reply to the speech before it (a `messages` record for data/prepare), keeping the
      pairs of 350..1100 characters (about 100..300 tokens): 1804 records
  python3 dev/pack_data.py trained SHARD.mask B T STEPS
      the targets that steps 1..STEPS of a run train, one number a line: one micro-batch of B x T
      a step, one rank, no shuffling, so step s reads the tokens of chunk (s - 1) mod chunks and
      target i of it trains when the mask byte of token i + 1 has bit 0 set, as
      llmc/run/dataloader.c reads them (a chunk is B T tokens; the shard holds
      (tokens - 1) / (B T) of them)
  python3 dev/pack_data.py pairs OUT.jsonl MAX_CHARS N
      preference pairs from the bundled text ({"prompt", "chosen", "rejected"} for data/prepare):
      a speech of three or more lines and the speech before it, MAX_CHARS / 3 .. MAX_CHARS
      characters together; the prompt is the speech before and the speaker's name, chosen the
      speech's verses on one line (" verse / verse"), rejected them in the play's layout (the
      style of scripts/pref_tiny.sh); the first N such pairs
  python3 dev/pack_data.py pairs-per-step SHARD.mask B T STEPS
      the preference pairs that steps 1..STEPS of a run train, one number a line, read as
      `trained` reads targets: step s reads chunk (s - 1) mod chunks, and a pair is a record start
      marked chosen (bit 2 of the mask byte, mask version 3) among the chunk's B T tokens
"""
import json, struct, sys


def records(out):
    text = open("data/tinyshakespeare.txt", encoding="utf-8").read()
    speeches = [s.strip() for s in text.split("\n\n") if s.strip()]
    n = 0
    with open(out, "w") as f:
        for prev, cur in zip(speeches, speeches[1:]):
            if 350 <= len(prev) + len(cur) <= 1100:
                msgs = [{"role": "user", "content": prev}, {"role": "assistant", "content": cur}]
                f.write(json.dumps({"messages": msgs}) + "\n")
                n += 1
    print("%d records in %s" % (n, out), file=sys.stderr)


def pairs(out, max_chars, n):
    text = open("data/tinyshakespeare.txt", encoding="utf-8").read()
    speeches = [s.strip() for s in text.split("\n\n") if s.strip()]
    k = 0
    with open(out, "w") as f:
        for prev, cur in zip(speeches, speeches[1:]):
            lines = cur.split("\n")
            if k == n or len(lines) < 3 or not lines[0].endswith(":") or not max_chars // 3 <= len(prev) + len(cur) <= max_chars:
                continue
            rec = {"prompt": prev + "\n\n" + lines[0], "chosen": " " + " / ".join(lines[1:]), "rejected": "\n" + "\n".join(lines[1:])}
            f.write(json.dumps(rec) + "\n")
            k += 1
    print("%d pairs in %s" % (k, out), file=sys.stderr)


def read_mask(mask_path, B, T):
    """The mask bytes of a shard and its number of B x T chunks."""
    data = open(mask_path, "rb").read()
    magic, version, ntok = struct.unpack("<3i", data[:12])
    if magic != 20261122:
        sys.exit("error: %s is not a loss mask (magic %d)" % (mask_path, magic))
    nchunks = (ntok - 1) // (B * T)
    if nchunks < 1:
        sys.exit("error: %s: %d tokens, fewer than one batch of %d x %d + 1" % (mask_path, ntok, B, T))
    return data[1024:], version, nchunks


def trained(mask_path, B, T, steps):
    m, _version, nchunks = read_mask(mask_path, B, T)
    chunk = B * T
    for s in range(steps):
        c = s % nchunks
        print(sum(x & 1 for x in m[c * chunk + 1:(c + 1) * chunk + 1]))


def pairs_per_step(mask_path, B, T, steps):
    m, version, nchunks = read_mask(mask_path, B, T)
    if version != 3:
        sys.exit("error: %s: mask version %d, not preference pairs (3)" % (mask_path, version))
    chunk = B * T
    for s in range(steps):
        c = s % nchunks
        print(sum(1 for x in m[c * chunk:(c + 1) * chunk] if x & 4))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "records":
        records(sys.argv[2])
    elif len(sys.argv) == 6 and sys.argv[1] == "trained":
        trained(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) == 5 and sys.argv[1] == "pairs":
        pairs(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) == 6 and sys.argv[1] == "pairs-per-step":
        pairs_per_step(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(__doc__)
