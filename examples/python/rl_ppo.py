"""RL from Python: per-token log-probs of sampled responses, a PPO clipped
objective through loss_fn, and optimizer steps (run by the tests).

    PYTHONPATH=build/python .venv-ci/bin/python examples/python/rl_ppo.py

A tiny randomly initialised Qwen3 (configs/qwen3-tiny) stands in for the
policy; the "rollouts" are fixed prompt + response sequences with a made-up
reward (the share of even tokens in the response), so the example runs in
seconds on a CPU. The steps of a PPO update:

  1. old log-probs: forward_only in eval mode returns log p(token | prefix)
     per position (model_output[i].log_probs, at backend.temperature);
  2. advantages: per-sequence rewards, normalised, on every response token;
  3. the clipped surrogate -min(r A, clip(r, 1 - eps, 1 + eps) A) over the
     response tokens, with r = exp(log_probs - old_log_probs), as a numpy
     loss_fn returning (loss, metrics, dlog_probs); per-token inputs travel in
     PackedBatch.extras, which the runtime slices per microbatch with the tokens.
"""

import pathlib
import sys

import numpy as np

import bumblebee as bb

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLIP = 0.2


def rollouts(rng, num_seqs=4, prompt=6, response=10, vocab=64):
    """Packed prompt + response sequences; the loss mask covers the responses."""
    ids = rng.integers(0, vocab, size=num_seqs * (prompt + response))
    mask = np.tile(np.r_[np.zeros(prompt), np.ones(response)], num_seqs)
    rewards = np.array([np.mean(ids[i * 16 + prompt : (i + 1) * 16] % 2 == 0) for i in range(num_seqs)])
    return ids.astype(np.int64), [prompt + response] * num_seqs, mask, rewards


def ppo_loss(outputs, batch, ctx):
    """The clipped surrogate, normalised by the response tokens of the whole batch."""
    mask = batch.shifted_loss_mask()
    adv = batch.extras["advantages"]
    ratio = np.exp(outputs.log_probs - batch.extras["old_log_probs"])
    clipped = np.clip(ratio, 1 - CLIP, 1 + CLIP)
    unclipped_wins = ratio * adv <= clipped * adv
    surrogate = np.minimum(ratio * adv, clipped * adv)
    loss = -np.sum(mask * surrogate) / ctx.num_tokens
    # d(-min(r A, clip(r) A))/d log_probs: -r A where the unclipped term is the min, else 0.
    dlog_probs = np.where(unclipped_wins, -mask * adv * ratio, 0.0) / ctx.num_tokens
    scored = mask > 0
    metrics = {"clip_fraction": float(np.mean(~unclipped_wins[scored])), "ratio": float(np.mean(ratio[scored]))}
    return loss, metrics, dlog_probs


def log_probs(rt, h, batch, num_microbatches):
    with rt.eval_mode(h):
        r = rt.forward_backward(h, batch, forward_only=True, num_microbatches=num_microbatches)
    return np.concatenate([o.log_probs for o in r.model_output])


def main():
    cfg = bb.RuntimeConfig(
        hf_path=str(ROOT / "configs" / "qwen3-tiny"),
        backend_cfg=bb.BBConfig(load_hf_weights=False, optimizer=bb.OptimizerConfig(lr=2e-5, clip_grad=1.0)),
    )
    rt = bb.create_runtime(cfg)
    h = rt.build_model()
    ids, seq_lens, mask, rewards = rollouts(np.random.default_rng(0))
    rollout = bb.PackedBatch(input_ids=ids, seq_lens=seq_lens, loss_mask=mask)

    old = log_probs(rt, h, rollout, num_microbatches=2)
    advantages = np.repeat((rewards - rewards.mean()) / (rewards.std() + 1e-8), seq_lens)
    batch = bb.PackedBatch(
        input_ids=ids, seq_lens=seq_lens, loss_mask=mask, extras={"old_log_probs": old, "advantages": advantages}
    )
    objective, ratios = [], []
    for epoch in range(4):
        with rt.train_mode(h):
            rt.zero_grad(h)
            r = rt.forward_backward(h, batch, loss_fn=ppo_loss, num_microbatches=2)
            ok, grad_norm, _ = rt.optimizer_step(h)
        objective.append(-sum(r.metrics["loss"]))
        ratios.append(np.mean(r.metrics["ratio"]))
        print(
            f"ppo epoch {epoch}: surrogate {objective[-1]:+.6f} ratio {ratios[-1]:.4f} "
            f"clip_fraction {np.mean(r.metrics['clip_fraction']):.3f} grad_norm {grad_norm:.4f}"
        )
    # The first epoch runs the policy that computed the old log-probs: ratio 1.
    if abs(ratios[0] - 1.0) > 1e-5:
        sys.exit(f"the first epoch's ratio is {ratios[0]}, expected 1")
    new = log_probs(rt, h, rollout, num_microbatches=2)
    scored = rollout.shifted_loss_mask() > 0
    gain = np.sum(advantages[scored] * (new[scored] - old[scored]))
    print(f"advantage-weighted log-prob change {gain:+.6f}")
    if not (objective[-1] > objective[0] and gain > 0):
        sys.exit(f"PPO did not improve the policy: surrogate {objective[0]:.6f} -> {objective[-1]:.6f}, gain {gain:.6f}")


if __name__ == "__main__":
    main()
