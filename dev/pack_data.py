#!/usr/bin/env python3
"""The data of the packing benchmarks (dev/bench_pack.sh on the CPU, the pack runs of
scripts/gpu_check.sh's train section on a GPU). Python standard library only.

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


def trained(mask_path, B, T, steps):
    data = open(mask_path, "rb").read()
    magic, _version, ntok = struct.unpack("<3i", data[:12])
    if magic != 20261122:
        sys.exit("error: %s is not a loss mask (magic %d)" % (mask_path, magic))
    m = data[1024:]
    chunk = B * T
    nchunks = (ntok - 1) // chunk
    if nchunks < 1:
        sys.exit("error: %s: %d tokens, fewer than one batch of %d x %d + 1" % (mask_path, ntok, B, T))
    for s in range(steps):
        c = s % nchunks
        print(sum(x & 1 for x in m[c * chunk + 1:(c + 1) * chunk + 1]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "records":
        records(sys.argv[2])
    elif len(sys.argv) == 6 and sys.argv[1] == "trained":
        trained(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(__doc__)
