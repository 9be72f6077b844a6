"""Shared pieces of the Python binding tests: the committed HF fixtures
(tests/fixtures/<name>/: tokens, reference numbers, safetensors) and runtimes
on them. Run with the module of a build tree on PYTHONPATH (ctest does:
PYTHONPATH=build/python python -m pytest tests/python)."""

import json
import os
import pathlib

import numpy as np
import pytest

import bumblebee as bb

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
BINARY_DIR = pathlib.Path(os.environ.get("BB_BINARY_DIR", ROOT / "build"))

# The AdamW run of the fixtures' reference.json (torch.optim.AdamW semantics, as bb-correctness).
ADAMW_WORDS = [
    "optimizer.lr=0.01",
    "optimizer.adam_beta2=0.95",
    "optimizer.weight_decay=0.1",
    "optimizer.clip_grad=0",
    "optimizer.no_weight_decay_1d=false",
]


def fixture_rows(name):
    return json.loads((FIXTURES / name / "tokens.json").read_text())


def fixture_batch(name, rows=None):
    rows = fixture_rows(name) if rows is None else rows
    return bb.PackedBatch(input_ids=np.array(sum(rows, []), dtype=np.int64), seq_lens=[len(r) for r in rows])


def reference(name):
    return json.loads((FIXTURES / name / "reference.json").read_text())


def ref_config(name, *words):
    """backend=ref (float64, one rank) on a fixture, with key=value overrides."""
    return bb.RuntimeConfig(backend="ref", hf_path=str(FIXTURES / name)).override(*words)


def read_safetensors(path):
    """{name: float64 array} of a safetensors file (F32/F64 tensors)."""
    data = pathlib.Path(path).read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = {"F32": np.float32, "F64": np.float64}[info["dtype"]]
        out[name] = np.frombuffer(data[8 + n + begin : 8 + n + end], dtype=dtype).reshape(info["shape"]).astype(np.float64)
    return out


def rel_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.fixture
def qwen3_tp():
    """A float64 runtime and model on the qwen3_tp fixture with the reference AdamW settings."""
    rt = bb.create_runtime(ref_config("qwen3_tp", *ADAMW_WORDS))
    return rt, rt.build_model()
