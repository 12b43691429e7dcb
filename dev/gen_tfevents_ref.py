"""Writes test/ref/tfevents/events.out.tfevents.1700000000.ref: a TensorBoard event file written
by the `tensorboard` package's own writer (EventFileWriter), for test/test_tfevents.c.

The events are EVENTS below (test/test_tfevents.c has the same table): steps and values that
exercise the encoding (a step of one varint byte, of two, of six, and step 0, which proto3 leaves
out; a value of 0, which Summary.Value's oneof still writes; a negative value; several values in
one Summary). The writer's first event (the file version) takes its wall time from time.time(),
fixed here to FIRST_WALL_TIME so that the file is the same on every run; the file is renamed from
the writer's own name (it adds the host, the pid and a counter).
Usage: python dev/gen_tfevents_ref.py   (pip install tensorboard)
"""
import glob
import os
import tempfile
import time

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

FIRST_WALL_TIME = 1700000000.25
EVENTS = [  # (wall_time, step, [(tag, simple_value), ...])
    (1700000001.5, 1, [("train/loss", 3.9453125), ("train/learning_rate", 0.0004), ("train/grad_norm", 0.875)]),
    (1700000002.75, 300, [("train/loss", -0.5), ("train/epoch", 0.0)]),
    (1700000003.0, 300, [("eval/loss", 4.25), ("eval/rewards/accuracies", 0.625)]),
    (1700000004.0, 2**40 + 3, [("train/tokens_per_second", 123456.78)]),
    (1700000005.0, 0, [("train/mfu", 1e-30)]),
]
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "ref", "tfevents", "events.out.tfevents.1700000000.ref")

with tempfile.TemporaryDirectory() as d:
    real_time = time.time
    time.time = lambda: FIRST_WALL_TIME  # (the writer's first event and its file name)
    try:
        w = EventFileWriter(d)
    finally:
        time.time = real_time
    for wall, step, values in EVENTS:
        s = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in values])
        w.add_event(event_pb2.Event(wall_time=wall, step=step, summary=s))
    w.close()
    (path,) = glob.glob(os.path.join(d, "events.out.tfevents.*"))
    data = open(path, "rb").read()
with open(OUT, "wb") as f:
    f.write(data)
print(f"{OUT}: {len(data)} bytes, {len(EVENTS) + 1} events")
