"""A Python loss_fn adapted to the runtime's C++ contract (LossFn: the loss, its
gradient with respect to each position's log-prob, and metrics).

Two forms, both called as loss_fn(outputs, batch, ctx) per microbatch with a
ModelOutputs, the microbatch as a PackedBatch and a LossContext:

  numpy:  returns (loss, metrics, dlog_probs): a finite scalar, a dict of
          scalars (or None) and the [T] gradient of the loss with respect to
          outputs.log_probs (None in forward_only calls).
  torch:  wrapped with bumblebee.torch_loss(fn); outputs.log_probs is a float64
          CPU tensor that requires grad, fn returns (loss, metrics) with a
          scalar tensor loss, and the gradient is taken by autograd.
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


def _gradient(value, num_tokens):
    if value is None:
        raise _native.Error("loss_fn returned no gradient (dlog_probs is None) in a call that runs the backward")
    grad = np.asarray(value)
    if grad.dtype.kind not in "fiu":
        raise _native.Error(f"loss_fn's dlog_probs has dtype {grad.dtype}, expected a float dtype")
    if grad.shape != (num_tokens,):
        raise _native.Error(
            f"loss_fn's dlog_probs has shape {grad.shape}, expected ({num_tokens},): one entry per token of the microbatch"
        )
    grad = np.ascontiguousarray(grad, dtype=np.float64)
    if not np.all(np.isfinite(grad)):
        raise _native.Error("loss_fn's dlog_probs holds non-finite values")
    return grad


class LossAdapter:
    """What the native runtime calls per microbatch: (log_probs, token_loss,
    microbatch) -> (loss, grad_log_probs or None, metrics), checked."""

    def __init__(self, fn, ctx):
        self.fn = fn
        self.ctx = ctx
        self.calls = 0

    def __call__(self, log_probs, token_loss, microbatch):
        batch = PackedBatch._from_native(microbatch)
        ctx = dataclasses.replace(self.ctx, microbatch=self.calls)
        self.calls += 1
        if isinstance(self.fn, torch_loss):
            return self._torch(log_probs, token_loss, batch, ctx)
        result = self.fn(ModelOutputs(log_probs=log_probs, token_loss=token_loss), batch, ctx)
        if not isinstance(result, tuple) or len(result) != 3:
            raise _native.Error(
                "loss_fn must return (loss, metrics, dlog_probs); a loss_fn written with torch "
                "returns (loss, metrics) and is wrapped with bumblebee.torch_loss(fn)"
            )
        loss, metrics, grad = result
        loss = _finite_loss(loss)
        grad = None if ctx.forward_only else _gradient(grad, log_probs.size)
        return loss, grad, _metrics(metrics)

    def _torch(self, log_probs, token_loss, batch, ctx):
        import torch

        lp = torch.from_numpy(log_probs).requires_grad_(not ctx.forward_only)
        outputs = ModelOutputs(log_probs=lp, token_loss=torch.from_numpy(token_loss))
        result = self.fn(outputs, batch, ctx)
        if not isinstance(result, tuple) or len(result) != 2:
            raise _native.Error("a torch loss_fn must return (loss, metrics)")
        loss, metrics = result
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise _native.Error("a torch loss_fn must return its loss as a one-element tensor")
        value = _finite_loss(loss.detach().reshape(()).item())
        if ctx.forward_only:
            return value, None, _metrics(metrics)
        grad = None
        if loss.requires_grad:
            (grad,) = torch.autograd.grad(loss.reshape(()), lp, allow_unused=True)
        grad = np.zeros_like(log_probs) if grad is None else grad.detach().cpu().numpy()
        return value, _gradient(grad, log_probs.size), _metrics(metrics)
