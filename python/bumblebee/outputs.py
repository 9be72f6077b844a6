"""What forward_backward returns and what a loss_fn receives: ModelOutputs,
ForwardResult and LossContext, with the seed library's field names.

Per-token arrays run over a microbatch's tokens in their packed order: entry t
belongs to position t, which predicts the token at t + 1 of its sequence (the
last position of each sequence holds 0).
"""

import dataclasses
from typing import Any


@dataclasses.dataclass
class ModelOutputs:
    """One microbatch's outputs, on the host.

    log_probs: [T] float64 log p(label at t + 1 | prefix) at the configured
    temperature (backend.temperature); present in forward_only calls and for a
    loss_fn. token_loss: [T] -log_probs x loss mask. entropy: [T] float64
    entropy of the next-token distribution at the temperature, computed
    vocab-parallel, with calculate_entropy=True (where log_probs are). Both
    hold 0 at each sequence's last position. routed_experts: [T, MoE layers,
    k] int64, the experts each token was routed to, with
    router_replay="record"; else None.
    """

    loss: float | None = None
    log_probs: Any = None
    token_loss: Any = None
    entropy: Any = None
    routed_experts: Any = None


@dataclasses.dataclass
class ForwardResult:
    """loss: over the whole batch (all dp ranks): the built-in loss's masked mean
    cross entropy, or with a loss_fn the mean of its microbatch values over
    microbatches and dp ranks. metrics: per-microbatch lists ("loss" and each key
    the loss_fn returned). aux_loss: the MoE load-balancing loss, else 0.
    num_tokens: loss tokens over the whole batch."""

    loss: float
    metrics: dict
    model_output: list
    aux_loss: float = 0.0
    num_tokens: int = 0


@dataclasses.dataclass
class LossContext:
    """What a loss_fn knows beside the outputs and the microbatch.

    temperature: the logits' divisor (backend.temperature). num_tokens: loss
    tokens of the whole batch over every microbatch and dp rank, so a loss
    normalised by it sums to a mean over the global batch. microbatch: this
    microbatch's index. source_batch: the batch forward_backward was given.
    The gradient fed to the backward is that of the sum of the loss_fn's values
    over microbatches and dp ranks (loss_scale 1).
    """

    temperature: float = 1.0
    calculate_entropy: bool = False
    return_log_probs: bool = True
    loss_scale: float = 1.0
    num_tokens: int = 0
    num_microbatches: int = 1
    microbatch: int = 0
    forward_only: bool = False
    source_batch: Any = None
