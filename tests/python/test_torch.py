"""The bindings with torch: torch tensors in (PackedBatch through DLPack),
log-probs out to torch without a copy, and a PPO clipped objective written in
torch (autograd) giving the same step as the numpy one of
examples/python/rl_ppo.py, whose gradient is written by hand. Skipped where
torch is not importable (CI's venv); run on the GPU machine and wherever torch
is installed (docs/python.md)."""

import importlib.util

import numpy as np
import pytest

import bumblebee as bb
from conftest import ADAMW_WORDS, ROOT, fixture_batch, ref_config, rel_err

torch = pytest.importorskip("torch")

FIXTURE = "qwen3_tp"


def rl_ppo():
    spec = importlib.util.spec_from_file_location("rl_ppo", ROOT / "examples" / "python" / "rl_ppo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@bb.torch_loss
def torch_ppo_loss(outputs, batch, ctx):
    """The clipped surrogate of rl_ppo.ppo_loss, with the gradient left to autograd."""
    clip = rl_ppo().CLIP
    mask = torch.from_numpy(batch.shifted_loss_mask())
    adv = torch.from_numpy(batch.extras["advantages"])
    ratio = torch.exp(outputs.log_probs - torch.from_numpy(batch.extras["old_log_probs"]))
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    return -(mask * surrogate).sum() / ctx.num_tokens, {"ratio": float(ratio.detach()[mask > 0].mean())}


def ppo_batch():
    base = fixture_batch(FIXTURE)
    rng = np.random.default_rng(3)
    T = base.input_ids.shape[0]
    # Old log-probs away from the current ones, so that some ratios leave [1 - eps, 1 + eps] and clip.
    old = -rng.uniform(0.5, 8.0, T)
    return bb.PackedBatch(
        input_ids=base.input_ids,
        seq_lens=base.seq_lens,
        extras={"old_log_probs": old, "advantages": rng.normal(size=T)},
    )


def step_with(loss_fn, batch):
    rt = bb.create_runtime(ref_config(FIXTURE, *ADAMW_WORDS))
    h = rt.build_model()
    with rt.train_mode(h):
        rt.zero_grad(h)
        r = rt.forward_backward(h, batch, loss_fn=loss_fn, num_microbatches=2)
        _, grad_norm, _ = rt.optimizer_step(h)
    return r, grad_norm, dict(rt.export_weights(h))


def test_a_torch_ppo_loss_gives_the_step_of_the_hand_written_numpy_gradient():
    batch = ppo_batch()
    (rt_, nt, wt), (rn, nn, wn) = step_with(torch_ppo_loss, batch), step_with(rl_ppo().ppo_loss, batch)
    assert abs(sum(rt_.metrics["loss"]) - sum(rn.metrics["loss"])) < 1e-12 * abs(sum(rn.metrics["loss"]))
    assert 0 < np.mean(rn.metrics["clip_fraction"]) < 1, "the batch must exercise both branches of the clip"
    assert abs(nt - nn) < 1e-12 * nn
    for name in wn:
        assert rel_err(wt[name], wn[name]) < 1e-12, name


def test_torch_tensors_make_the_same_batch_as_numpy():
    base = fixture_batch(FIXTURE)
    ids = torch.from_numpy(base.input_ids.copy())
    mask = torch.ones(ids.shape[0], dtype=torch.float32)
    a = bb.PackedBatch(input_ids=ids, seq_lens=base.seq_lens, loss_mask=mask)
    b = bb.PackedBatch(input_ids=base.input_ids, seq_lens=base.seq_lens, loss_mask=mask.numpy())
    assert np.array_equal(a.input_ids, b.input_ids) and np.array_equal(a.loss_mask, b.loss_mask)
    if torch.cuda.is_available():
        c = bb.PackedBatch(input_ids=ids.cuda(), seq_lens=base.seq_lens)
        assert np.array_equal(c.input_ids, b.input_ids)


def test_log_probs_reach_torch_without_a_copy():
    rt = bb.create_runtime(ref_config(FIXTURE))
    h = rt.build_model()
    with rt.eval_mode(h):
        r = rt.forward_backward(h, fixture_batch(FIXTURE), forward_only=True)
    lp = r.model_output[0].log_probs
    t = torch.from_dlpack(lp)
    assert t.dtype == torch.float64 and t.shape == lp.shape
    assert t.data_ptr() == lp.ctypes.data
