"""The runtime API from Python (python/bumblebee/runtime.py), one contract per
method, in float64 on the CPU against the C++ runtime's numbers: bb-correctness
on the same fixture and settings, and the HF reference it reproduces."""

import json
import subprocess

import numpy as np
import pytest

import bumblebee as bb
from conftest import ADAMW_WORDS, BINARY_DIR, FIXTURES, fixture_batch, read_safetensors, reference, ref_config, rel_err

FIXTURE = "qwen3_tp"


def train(rt, h, batch, steps, num_microbatches=1):
    """Losses before each step and the grad norms of the steps."""
    losses, norms = [], []
    with rt.train_mode(h):
        for _ in range(steps):
            rt.zero_grad(h)
            losses.append(rt.forward_backward(h, batch, num_microbatches=num_microbatches).loss)
            ok, grad_norm, num_zeros = rt.optimizer_step(h)
            assert ok and num_zeros >= 0
            norms.append(grad_norm)
            rt.lr_scheduler_step(h)
    return losses, norms


def test_training_reproduces_the_cpp_runtime_and_hf(qwen3_tp):
    rt, h = qwen3_tp
    losses, norms = train(rt, h, fixture_batch(FIXTURE), 5)
    ref = reference(FIXTURE)
    assert rel_err(losses, ref["losses"]) < 1e-8
    assert abs(norms[0] - ref["grad_norm"]) < 1e-9 * ref["grad_norm"]
    tool = BINARY_DIR / "bin" / "bb-correctness"
    if not tool.exists():
        pytest.skip(f"{tool} is not built")
    words = ["backend=ref", f"hf_path={FIXTURES / FIXTURE}", f"tokens={FIXTURES / FIXTURE / 'tokens.json'}", "steps=5"]
    cpp = json.loads(subprocess.run([str(tool), *words, *ADAMW_WORDS], check=True, capture_output=True).stdout)
    assert rel_err(losses, cpp["losses"]) < 1e-12
    assert abs(norms[0] - cpp["grad_norm"]) < 1e-12 * cpp["grad_norm"]


def test_forward_backward_result_and_microbatches(qwen3_tp):
    rt, h = qwen3_tp
    batch = fixture_batch(FIXTURE)
    with rt.train_mode(h):
        rt.zero_grad(h)
        whole = rt.forward_backward(h, batch)
        rt.zero_grad(h)
        split = rt.forward_backward(h, batch, loss_fn=None, num_microbatches=2)
    assert abs(whole.loss - reference(FIXTURE)["loss"]) < 1e-9 * whole.loss
    assert abs(split.loss - whole.loss) < 1e-12 * whole.loss
    assert len(split.metrics["loss"]) == 2 and len(split.model_output) == 2
    assert split.num_tokens == batch.total_tokens - batch.num_seqs
    assert split.aux_loss == 0.0
    assert split.model_output[0].log_probs is None   # the built-in training loss keeps them on the device


def test_forward_only_log_probs_are_log_softmax_of_the_logits_at_the_temperature():
    batch = fixture_batch(FIXTURE)
    plain = bb.create_runtime(ref_config(FIXTURE))
    logits = plain.logits(plain.build_model(), batch)
    for temperature in (1.0, 0.7):
        rt = bb.create_runtime(ref_config(FIXTURE, f"backend.temperature={temperature}"))
        h = rt.build_model()
        with rt.eval_mode(h):
            r = rt.forward_backward(h, batch, forward_only=True)
        scaled = logits / temperature
        top = scaled.max(1, keepdims=True)
        log_softmax = scaled - top - np.log(np.exp(scaled - top).sum(1, keepdims=True))
        expected = np.zeros(batch.total_tokens)
        start = 0
        for n in batch.seq_lens:
            for t in range(start, start + n - 1):
                expected[t] = log_softmax[t, batch.input_ids[t + 1]]
            start += n
        assert r.model_output[0].log_probs.dtype == np.float64
        assert rel_err(r.model_output[0].log_probs, expected) < 1e-12
        assert r.model_output[0].entropy is None


def test_logits_match_hf():
    rt = bb.create_runtime(ref_config(FIXTURE))
    h = rt.build_model()
    ref = reference(FIXTURE)
    hf = np.fromfile(FIXTURES / FIXTURE / ref["logits_file"], dtype=np.float64).reshape(-1, ref["logits_shape"][-1])
    assert rel_err(rt.logits(h, fixture_batch(FIXTURE)), hf) < 1e-9


def test_modes_are_scoped():
    rt = bb.create_runtime(ref_config(FIXTURE))
    h = rt.build_model()
    assert h.training
    with rt.eval_mode(h):
        assert not h.training
        with rt.train_mode(h):
            assert h.training
        assert not h.training
    assert h.training
    assert h.dp_rank == 0 and h.dp_size == 1 and h.vocab_size == 157 and h.config["model_type"] == "qwen3"


def test_export_weights_yields_the_checkpoint_in_hf_names():
    rt = bb.create_runtime(ref_config(FIXTURE))
    h = rt.build_model()
    exported = dict(rt.export_weights(h))
    on_disk = read_safetensors(FIXTURES / FIXTURE / "model.safetensors")
    assert set(exported) == set(on_disk)
    for name, array in exported.items():
        assert array.dtype == np.float64 and array.shape == on_disk[name].shape
        np.testing.assert_array_equal(array, on_disk[name])
    assert all(a.dtype == np.float32 for _, a in rt.export_weights(h, dtype="float32"))


def test_save_and_load_checkpoint_resume_bit_identically(qwen3_tp, tmp_path):
    rt, h = qwen3_tp
    batch = fixture_batch(FIXTURE)
    train(rt, h, batch, 2)
    rt.save_checkpoint(h, tmp_path / "ckpt")
    after, _ = train(rt, h, batch, 2)

    rt2 = bb.create_runtime(ref_config(FIXTURE, *ADAMW_WORDS))
    h2 = rt2.build_model()
    assert rt2.load_checkpoint(h2, tmp_path / "ckpt") == 2
    resumed, _ = train(rt2, h2, batch, 2)
    assert resumed == after


def test_save_hf_checkpoint_writes_what_export_weights_yields(tmp_path):
    rt = bb.create_runtime(ref_config(FIXTURE))
    h = rt.build_model()
    rt.save_hf_checkpoint(h, tmp_path / "hf")
    assert (tmp_path / "hf" / "config.json").exists()
    rt2 = bb.create_runtime(bb.RuntimeConfig(backend="ref", hf_path=str(tmp_path / "hf")))
    assert rel_err(rt2.logits(rt2.build_model(), fixture_batch(FIXTURE)), rt.logits(h, fixture_batch(FIXTURE))) < 1e-15


def test_lr_schedule():
    rt = bb.create_runtime(ref_config(FIXTURE, "optimizer.lr=1e-3", "optimizer.lr_warmup_steps=2", "optimizer.lr_warmup_init=0"))
    h = rt.build_model()
    assert rt.current_lr(h) == 0.0
    assert rt.lr_scheduler_step(h) == pytest.approx(5e-4)
    assert rt.lr_scheduler_step(h) == pytest.approx(1e-3)
