"""loss_fn from Python (python/bumblebee/loss.py): a loss over per-token
log-probs, numpy form (returns its gradient) and torch form (autograd), fed
to the backward. A loss_fn written to equal the built-in masked mean cross
entropy must give its loss and gradients to 1e-12 in float64."""

import numpy as np
import pytest

import bumblebee as bb
from conftest import ADAMW_WORDS, fixture_batch, ref_config, rel_err

FIXTURE = "qwen3_tp"


def mean_nll(outputs, batch, ctx):
    """The built-in loss, written over log-probs: -sum(mask x log_probs) / global loss tokens."""
    mask = batch.shifted_loss_mask()
    loss = -np.sum(mask * outputs.log_probs) / ctx.num_tokens
    return loss, {"tokens": mask.sum()}, -mask / ctx.num_tokens


def step_with(loss_fn, batch, num_microbatches=2):
    """One training step on a fresh float64 model: (result, grad_norm, weights after the step)."""
    rt = bb.create_runtime(ref_config(FIXTURE, *ADAMW_WORDS))
    h = rt.build_model()
    with rt.train_mode(h):
        rt.zero_grad(h)
        r = rt.forward_backward(h, batch, loss_fn=loss_fn, num_microbatches=num_microbatches)
        _, grad_norm, _ = rt.optimizer_step(h)
    return r, grad_norm, dict(rt.export_weights(h))


def assert_same_step(a, b):
    (ra, na, wa), (rb, nb, wb) = a, b
    assert abs(na - nb) < 1e-12 * nb
    for name in wb:
        assert rel_err(wa[name], wb[name]) < 1e-12, name


def test_numpy_mean_nll_reproduces_the_built_in_loss_and_gradients():
    batch = bb.PackedBatch(
        input_ids=fixture_batch(FIXTURE).input_ids,
        seq_lens=fixture_batch(FIXTURE).seq_lens,
        loss_mask=np.array([1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1] * 2, dtype=np.float32),
    )
    builtin = step_with(None, batch)
    custom = step_with(mean_nll, batch)
    assert abs(sum(custom[0].metrics["loss"]) - builtin[0].loss) < 1e-12 * builtin[0].loss
    assert custom[0].metrics["tokens"] == [8.0, 8.0]
    assert custom[0].num_tokens == 16
    assert_same_step(custom, builtin)
    lp = custom[0].model_output[0].log_probs
    assert lp.shape == (11,) and lp[-1] == 0.0 and np.all(lp[:-1] < 0)


def test_loss_context_and_microbatches():
    seen = []

    def record(outputs, batch, ctx):
        seen.append((ctx.microbatch, ctx.num_microbatches, ctx.temperature, ctx.source_batch.total_tokens, batch.total_tokens))
        return mean_nll(outputs, batch, ctx)

    step_with(record, fixture_batch(FIXTURE))
    assert seen == [(0, 2, 1.0, 22, 11), (1, 2, 1.0, 22, 11)]


def test_forward_only_loss_fn_needs_no_gradient():
    rt = bb.create_runtime(ref_config(FIXTURE))
    h = rt.build_model()
    with rt.eval_mode(h):
        r = rt.forward_backward(h, fixture_batch(FIXTURE), lambda o, b, c: (-o.log_probs.sum(), None, None), forward_only=True)
    assert r.metrics["loss"][0] > 0


def test_torch_mean_nll_reproduces_the_built_in_loss_and_gradients():
    torch = pytest.importorskip("torch")

    @bb.torch_loss
    def torch_mean_nll(outputs, batch, ctx):
        mask = torch.from_numpy(batch.shifted_loss_mask())
        return -(mask * outputs.log_probs).sum() / ctx.num_tokens, {}

    batch = fixture_batch(FIXTURE)
    assert_same_step(step_with(torch_mean_nll, batch), step_with(None, batch))


def test_the_ppo_example_gradient_matches_float64_finite_differences():
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("rl_ppo", ROOT / "examples" / "python" / "rl_ppo.py")
    rl_ppo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rl_ppo)
    rng = np.random.default_rng(1)
    T = 12
    old = -rng.uniform(0.5, 3.0, T)
    batch = bb.PackedBatch(
        input_ids=np.arange(T),
        seq_lens=[5, 7],
        loss_mask=rng.integers(0, 2, T),
        extras={"old_log_probs": old, "advantages": rng.normal(size=T)},
    )
    ctx = bb.LossContext(num_tokens=int(batch.shifted_loss_mask().sum()))
    # Log-probs near the old ones and beyond the clip range, away from the kinks at 1 +- eps.
    lp = old + rng.choice([-0.5, -0.05, 0.05, 0.5], T)
    _, _, grad = rl_ppo.ppo_loss(bb.ModelOutputs(log_probs=lp), batch, ctx)
    h = 1e-6
    for t in range(T):
        up, down = lp.copy(), lp.copy()
        up[t] += h
        down[t] -= h
        fd = (rl_ppo.ppo_loss(bb.ModelOutputs(log_probs=up), batch, ctx)[0] - rl_ppo.ppo_loss(bb.ModelOutputs(log_probs=down), batch, ctx)[0]) / (2 * h)
        assert abs(grad[t] - fd) < 1e-8, t
