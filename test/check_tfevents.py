"""A run's TensorBoard scalars against its log.jsonl (test/test_tensorboard.sh).

  python3 test/check_tfevents.py dump DUMP LOG_JSONL
      DUMP: the output of `test_tfevents dump FILE` (our reader: every record's CRCs checked)
  $TB_PYTHON test/check_tfevents.py accumulator DIR LOG_JSONL
      DIR: the --tensorboard directory, read by the `tensorboard` package's EventAccumulator

Expected: every number of LOG_JSONL that is not null, as a scalar at its line's step, tagged as
docs/TRAINING.md says (HF Trainer's names: "val_X" -> "eval/X", train_loss -> train/loss, lr ->
train/learning_rate, tok_per_s -> train/tokens_per_second, any other member X -> train/X), its
value the JSON number in float32. Checked: the same (step, tag) pairs, each once (no step twice),
and the same values exactly. Prints one line; exit status 1 on a difference.
"""
import json
import struct
import sys

HF = {"train_loss": "loss", "lr": "learning_rate", "tok_per_s": "tokens_per_second"}


def tag(key):
    return "eval/" + key[4:] if key.startswith("val_") else "train/" + HF.get(key, key)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected(log_path):
    want = {}
    for line in open(log_path):
        obj = json.loads(line)
        step = obj.pop("step")
        for k, v in obj.items():
            if v is None or isinstance(v, bool):
                continue
            key = (step, tag(k))
            if key in want:
                sys.exit(f"FAIL {log_path}: {key} twice")
            want[key] = f32(v)
    return want


def from_dump(path):
    got = []
    for line in open(path):
        if line.startswith("version "):
            continue
        step, t, v = line.split()
        got.append((int(step), t, f32(float(v))))  # (%.9g: the float32 exactly)
    return got


def from_accumulator(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(logdir, size_guidance={"scalars": 0})  # (0: keep every event)
    ea.Reload()
    return [(e.step, t, e.value) for t in ea.Tags()["scalars"] for e in ea.Scalars(t)]


def main():
    mode, src, log_path = sys.argv[1:4]
    got = from_dump(src) if mode == "dump" else from_accumulator(src)
    want = expected(log_path)
    seen, twice, wrong = {}, [], []
    for step, t, v in got:
        if (step, t) in seen:
            twice.append((step, t))
        seen[(step, t)] = v
    for key, v in want.items():
        if key in seen and seen[key] != v:
            wrong.append((key, seen[key], v))
    missing = sorted(set(want) - set(seen))
    extra = sorted(set(seen) - set(want))
    steps = sorted({s for s, _ in want})
    if twice or wrong or missing or extra:
        print(f"FAIL {mode}: {len(twice)} twice {twice[:3]}, {len(wrong)} values differ {wrong[:3]}, "
              f"{len(missing)} missing {missing[:3]}, {len(extra)} not in log.jsonl {extra[:3]}")
        sys.exit(1)
    print(f"{mode}: {len(got)} scalars of {len({t for _, t in want})} tags at steps {steps[0]}-{steps[-1]}, each once, as log.jsonl has them")


main()
