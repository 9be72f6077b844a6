#!/usr/bin/env python3
"""TensorBoard reads the event files bb-train writes.

  tensorboard_reads_events.py RUN_DIR [--steps N]      check an existing run directory
  tensorboard_reads_events.py --bb-train PATH          run a short bb-train into a temporary
                                                       directory first, then check it

Loads RUN_DIR with tensorboard's own EventAccumulator (the reader behind the
TensorBoard UI) and checks that the tags train/loss, train/grad_norm,
train/lr, train/tokens_per_s and valid/loss are there, at exactly the steps
and with the values (to float32 precision) that RUN_DIR/metrics.jsonl logged.
Exits 0 on success, 1 with a message on the first mismatch.
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

TRAIN_TAGS = {"train/loss": "loss", "train/grad_norm": "grad_norm", "train/lr": "lr",
              "train/tokens_per_s": "tokens_per_s"}


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-30)


def check(run_dir, steps):
    files = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    if len(files) != 1:
        fail(f"expected one event file in {run_dir}, found {files}")
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    train = [r for r in records if r["type"] == "train"]
    valid = [r for r in records if r["type"] == "valid"]
    if steps is not None and len(train) != steps:
        fail(f"metrics.jsonl has {len(train)} train records, expected {steps}")
    if not valid:
        fail("metrics.jsonl has no validation record")

    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})   # 0: keep every event
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    missing = (set(TRAIN_TAGS) | {"valid/loss"}) - tags
    if missing:
        fail(f"tags {sorted(missing)} missing; TensorBoard sees {sorted(tags)}")
    for tag, field in list(TRAIN_TAGS.items()) + [("valid/loss", "loss")]:
        events = acc.Scalars(tag)
        expected = valid if tag.startswith("valid") else train
        if [e.step for e in events] != [r["step"] for r in expected]:
            fail(f"{tag}: steps {[e.step for e in events]} != metrics.jsonl {[r['step'] for r in expected]}")
        for e, r in zip(events, expected):
            if not close(e.value, float(r[field])):
                fail(f"{tag} at step {e.step}: TensorBoard {e.value} != metrics.jsonl {r[field]}")
    print(f"OK: {files[0]}: {len(train)} train steps x {len(TRAIN_TAGS)} tags and "
          f"{len(valid)} valid/loss points read by TensorBoard, matching metrics.jsonl")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("run_dir", nargs="?")
    p.add_argument("--steps", type=int)
    p.add_argument("--bb-train", help="bb-train binary: train briefly into a temporary directory, then check it")
    a = p.parse_args()
    if a.bb_train:
        steps = 30
        with tempfile.TemporaryDirectory() as out:
            cmd = [a.bb_train, "recipe=recipes/qwen3_tiny_pretrain.json", f"train.steps={steps}",
                   "train.micro_batch_size=2", "train.eval_interval=10", "train.eval_batches=1",
                   "train.log_interval=10", "optimizer.lr_warmup_steps=5", f"output.dir={out}"]
            print("$ " + " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
            check(out, steps)
    elif a.run_dir:
        check(a.run_dir, a.steps)
    else:
        p.error("give RUN_DIR or --bb-train PATH")


if __name__ == "__main__":
    main()
