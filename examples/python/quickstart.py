"""Quick start: train a model through the runtime API from Python (the C++
quick start, examples/quickstart.cpp, in Python; run by the tests).

    PYTHONPATH=build/python .venv-ci/bin/python examples/python/quickstart.py [HF_DIR]

Builds the model in HF_DIR (default: the tiny Qwen3 config shipped in
configs/, randomly initialised), trains it for a few AdamW steps on a fixed
packed batch of two sequences and prints the loss, which must fall.
"""

import pathlib
import sys

import numpy as np

import bumblebee as bb

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    hf_dir = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "configs" / "qwen3-tiny")
    cfg = bb.RuntimeConfig(
        backend="bb",                                  # or "ref": the float64 baseline path
        hf_path=hf_dir,
        backend_cfg=bb.BBConfig(
            model_name="auto",                         # from config.json's model_type
            load_hf_weights=len(sys.argv) > 1,         # the shipped config has no weights: random init
            parallel=bb.ParallelConfig(tp=1),
            optimizer=bb.OptimizerConfig(lr=2e-3),
        ),
    )
    rt = bb.create_runtime(cfg)
    h = rt.build_model()

    ids = np.concatenate([(np.arange(48) * 7) % 50, (np.arange(32) * 3) % 40]).astype(np.int64)
    batch = bb.PackedBatch(input_ids=ids, seq_lens=[48, 32])   # two sequences, packed (THD), no padding

    losses = []
    for step in range(8):
        with rt.train_mode(h):
            rt.zero_grad(h)
            r = rt.forward_backward(h, batch, loss_fn=None, num_microbatches=2)
            ok, grad_norm, num_zeros = rt.optimizer_step(h)
            rt.lr_scheduler_step(h)
        print(f"step {step} loss {r.loss:.4f} grad_norm {grad_norm:.4f} update {'ok' if ok else 'skipped'}")
        losses.append(r.loss)
    if not losses[-1] < losses[0]:
        sys.exit(f"loss did not fall: {losses[0]:.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
