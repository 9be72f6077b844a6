"""Per-token entropy from Python: forward_backward(calculate_entropy=True)
fills ModelOutputs.entropy (float64 on the CPU: equal to the entropy of the
full softmax of the logits at the temperature), and a loss_fn may use it with a
gradient (an entropy bonus), in numpy (returning dentropy) and, where torch is
importable, in torch; both give the same step."""

import numpy as np
import pytest

import bumblebee as bb
from conftest import ADAMW_WORDS, fixture_batch, ref_config, rel_err

FIXTURE = "qwen3_tp"
BETA = 0.3


def full_softmax_entropy(logits, batch):
    top = logits.max(1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(1, keepdims=True))
    entropy = -(np.exp(logp) * logp).sum(1)
    return entropy * np.where(batch.shifted_loss_mask() > 0, 1.0, 0.0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_entropy_equals_the_full_softmax_entropy(temperature):
    batch = fixture_batch(FIXTURE)
    rt = bb.create_runtime(ref_config(FIXTURE, f"backend.temperature={temperature}"))
    h = rt.build_model()
    logits = rt.logits(h, batch)   # at the temperature
    r = rt.forward_backward(h, batch, forward_only=True, calculate_entropy=True, num_microbatches=2)
    entropy = np.concatenate([o.entropy for o in r.model_output])
    assert entropy.dtype == np.float64 and entropy.shape == (batch.total_tokens,)
    assert rel_err(entropy, full_softmax_entropy(logits, batch)) < 1e-12
    plain = rt.forward_backward(h, batch, forward_only=True)
    assert plain.model_output[0].entropy is None


def entropy_bonus(outputs, batch, ctx):
    """Mean NLL minus BETA x mean entropy over the loss tokens (numpy form)."""
    mask = batch.shifted_loss_mask() / ctx.num_tokens
    loss = -(mask * outputs.log_probs).sum() - BETA * (mask * outputs.entropy).sum()
    return loss, {"entropy": float((mask * outputs.entropy).sum())}, -mask, -BETA * mask


def step(loss_fn, calculate_entropy=True):
    rt = bb.create_runtime(ref_config(FIXTURE, *ADAMW_WORDS))
    h = rt.build_model()
    with rt.train_mode(h):
        rt.zero_grad(h)
        r = rt.forward_backward(h, fixture_batch(FIXTURE), loss_fn, num_microbatches=2, calculate_entropy=calculate_entropy)
        _, grad_norm, _ = rt.optimizer_step(h)
    return r, grad_norm, dict(rt.export_weights(h))


def test_an_entropy_bonus_changes_the_step_and_its_metric_is_the_entropy():
    r, norm, weights = step(entropy_bonus)
    assert len(r.metrics["entropy"]) == 2 and all(e > 0 for e in r.metrics["entropy"])
    no_bonus = lambda o, b, c: entropy_bonus(o, b, c)[:3]
    r0, norm0, weights0 = step(no_bonus)
    assert norm != norm0
    assert any(not np.array_equal(weights[n], weights0[n]) for n in weights)


def test_an_entropy_bonus_in_torch_equals_the_numpy_one():
    torch = pytest.importorskip("torch")

    def torch_bonus(outputs, batch, ctx):
        mask = torch.from_numpy(batch.shifted_loss_mask() / ctx.num_tokens)
        return -(mask * outputs.log_probs).sum() - BETA * (mask * outputs.entropy).sum(), {}

    (rn, nn, wn), (rt_, nt, wt) = step(entropy_bonus), step(bb.torch_loss(torch_bonus))
    assert abs(nt - nn) < 1e-12 * nn
    assert all(rel_err(wt[n], wn[n]) < 1e-12 for n in wn)
