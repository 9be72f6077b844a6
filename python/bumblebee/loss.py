"""A Python loss_fn adapted to the runtime's C++ contract (LossFn: the loss, its
gradient with respect to each position's log-prob, and metrics).

Two forms, both called as loss_fn(outputs, batch, ctx) per microbatch with a
ModelOutputs, the microbatch as a PackedBatch and a LossContext:

  numpy:  returns (loss, metrics, dlog_probs): a finite scalar, a dict of
          scalars (or None) and the [T] gradient of the loss with respect to
          outputs.log_probs (None in forward_only calls); with
          calculate_entropy it may return (loss, metrics, dlog_probs,
          dentropy), dentropy the [T] gradient with respect to outputs.entropy
          (an entropy bonus).
  torch:  wrapped with bumblebee.torch_loss(fn); outputs.log_probs (and with
          calculate_entropy outputs.entropy) are float64 CPU tensors that
          require grad, fn returns (loss, metrics) with a scalar tensor loss,
          and the gradients are taken by autograd.
"""

import dataclasses
import math

import numpy as np

from . import _bumblebee as _native
from .batch import PackedBatch
from .outputs import ModelOutputs


class torch_loss:
    """Marks a loss_fn written with torch (see the module doc)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, outputs, batch, ctx):
        return self.fn(outputs, batch, ctx)


def _finite_loss(value):
    try:
        loss = float(value)
    except (TypeError, ValueError):
        raise _native.Error(f"loss_fn returned a loss of type {type(value).__name__}, expected a scalar") from None
    if not math.isfinite(loss):
        raise _native.Error(f"loss_fn returned a non-finite loss ({loss})")
    return loss


def _metrics(value):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _native.Error(f"loss_fn returned metrics of type {type(value).__name__}, expected a dict of scalars")
    return {str(k): float(v) for k, v in value.items()}


def _gradient(value, num_tokens, what="dlog_probs"):
    if value is None:
        raise _native.Error(f"loss_fn returned no gradient ({what} is None) in a call that runs the backward")
    grad = np.asarray(value)
    if grad.dtype.kind not in "fiu":
        raise _native.Error(f"loss_fn's {what} has dtype {grad.dtype}, expected a float dtype")
    if grad.shape != (num_tokens,):
        raise _native.Error(
            f"loss_fn's {what} has shape {grad.shape}, expected ({num_tokens},): one entry per token of the microbatch"
        )
    grad = np.ascontiguousarray(grad, dtype=np.float64)
    if not np.all(np.isfinite(grad)):
        raise _native.Error(f"loss_fn's {what} holds non-finite values")
    return grad


class LossAdapter:
    """What the native runtime calls per microbatch: (log_probs, token_loss,
    entropy or None, microbatch) -> (loss, grad_log_probs or None, metrics,
    grad_entropy or None), checked."""

    def __init__(self, fn, ctx):
        self.fn = fn
        self.ctx = ctx
        self.calls = 0

    def __call__(self, log_probs, token_loss, entropy, microbatch):
        batch = PackedBatch._from_native(microbatch)
        ctx = dataclasses.replace(self.ctx, microbatch=self.calls)
        self.calls += 1
        if isinstance(self.fn, torch_loss):
            return self._torch(log_probs, token_loss, entropy, batch, ctx)
        result = self.fn(ModelOutputs(log_probs=log_probs, token_loss=token_loss, entropy=entropy), batch, ctx)
        lengths = (3, 4) if entropy is not None else (3,)
        if not isinstance(result, tuple) or len(result) not in lengths:
            raise _native.Error(
                "loss_fn must return (loss, metrics, dlog_probs)"
                + (", or (loss, metrics, dlog_probs, dentropy) with calculate_entropy" if entropy is not None else "")
                + "; a loss_fn written with torch returns (loss, metrics) and is wrapped with bumblebee.torch_loss(fn)"
            )
        loss, metrics, grad = result[:3]
        loss = _finite_loss(loss)
        if ctx.forward_only:
            return loss, None, _metrics(metrics), None
        dentropy = result[3] if len(result) == 4 else None
        dentropy = None if dentropy is None else _gradient(dentropy, log_probs.size, "dentropy")
        return loss, _gradient(grad, log_probs.size), _metrics(metrics), dentropy

    def _torch(self, log_probs, token_loss, entropy, batch, ctx):
        import torch

        lp = torch.from_numpy(log_probs).requires_grad_(not ctx.forward_only)
        ent = None if entropy is None else torch.from_numpy(entropy).requires_grad_(not ctx.forward_only)
        outputs = ModelOutputs(log_probs=lp, token_loss=torch.from_numpy(token_loss), entropy=ent)
        result = self.fn(outputs, batch, ctx)
        if not isinstance(result, tuple) or len(result) != 2:
            raise _native.Error("a torch loss_fn must return (loss, metrics)")
        loss, metrics = result
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise _native.Error("a torch loss_fn must return its loss as a one-element tensor")
        value = _finite_loss(loss.detach().reshape(()).item())
        if ctx.forward_only:
            return value, None, _metrics(metrics), None
        inputs = [lp] if ent is None else [lp, ent]
        grads = [None] * len(inputs)
        if loss.requires_grad:
            grads = torch.autograd.grad(loss.reshape(()), inputs, allow_unused=True)
        grad = np.zeros_like(log_probs) if grads[0] is None else grads[0].detach().cpu().numpy()
        dentropy = None
        if ent is not None and grads[1] is not None:
            dentropy = _gradient(grads[1].detach().cpu().numpy(), log_probs.size, "dentropy")
        return value, _gradient(grad, log_probs.size), _metrics(metrics), dentropy
