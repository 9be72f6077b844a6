"""PackedBatch: the data contract of forward_backward (packed THD, no padding).

Sequences are concatenated: input_ids[T], labels[T] (default: input_ids) and
loss_mask[T] (default: every position) run over all tokens; seq_lens[S] says
where each sequence ends. Position t is scored on the token at t + 1 of its
sequence, so the last position of a sequence scores nothing.

routed_experts (MoE router replay): int [T, MoE layers, k], the experts each
token is routed to when forward_backward(..., router_replay="replay") runs, as
a "record" call returns them in ModelOutputs.routed_experts.

Arrays in: numpy arrays, lists, or any object with ``__dlpack__`` (a torch
tensor; a GPU tensor is copied to the host, since the runtime moves the batch
itself). Token ids, labels, positions and lengths must be of an integer dtype,
the loss mask of a float, bool or integer dtype, extras numeric.
"""

import numpy as np

from . import _bumblebee as _native

_DLPACK_CPU = 1


def _host_array(field, value):
    if hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray):
        device_type, device_id = value.__dlpack_device__()
        if device_type != _DLPACK_CPU:
            if not hasattr(value, "cpu"):
                raise _native.Error(
                    f"PackedBatch.{field}: array on DLPack device ({device_type}, {device_id}) and no .cpu() to copy it to the host"
                )
            value = value.cpu()
        value = np.from_dlpack(value)
    array = np.asarray(value)
    if array.ndim != 1:
        raise _native.Error(f"PackedBatch.{field}: expected a 1-D array, got shape {array.shape}")
    return array


def _typed(field, value, kinds, dtype, expected):
    array = _host_array(field, value)
    if array.size and array.dtype.kind not in kinds:
        raise _native.Error(f"PackedBatch.{field}: dtype {array.dtype}, expected {expected}")
    return np.ascontiguousarray(array, dtype=dtype)


def _routes(value, num_tokens):
    """routed_experts as a C-contiguous int64 [T, L, k] array."""
    if hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray):
        if value.__dlpack_device__()[0] != _DLPACK_CPU:
            value = value.cpu()
        value = np.from_dlpack(value)
    array = np.asarray(value)
    if array.ndim != 3 or array.shape[0] != num_tokens:
        raise _native.Error(
            f"PackedBatch.routed_experts: shape {array.shape}, expected [{num_tokens} tokens, MoE layers, experts per token]"
        )
    if array.size and array.dtype.kind not in "iu":
        raise _native.Error(f"PackedBatch.routed_experts: dtype {array.dtype}, expected an integer dtype")
    return np.ascontiguousarray(array, dtype=np.int64)


class PackedBatch:
    """A packed batch of sequences; see the module doc for each field. The arrays
    are checked and copied for the runtime when the batch is made: treat the
    batch as immutable and make a new one for other data."""

    def __init__(
        self, input_ids, seq_lens=None, labels=None, loss_mask=None, position_ids=None, extras=None, routed_experts=None
    ):
        ints = "an integer dtype (int64)"
        self.input_ids = _typed("input_ids", input_ids, "iu", np.int64, ints)
        self.seq_lens = (
            np.array([self.input_ids.size], dtype=np.int64)
            if seq_lens is None
            else _typed("seq_lens", seq_lens, "iu", np.int64, ints)
        )
        self.labels = _typed("labels", [] if labels is None else labels, "iu", np.int64, ints)
        self.loss_mask = _typed(
            "loss_mask", [] if loss_mask is None else loss_mask, "fbiu", np.float32, "a float, bool or integer dtype"
        )
        self.position_ids = _typed("position_ids", [] if position_ids is None else position_ids, "iu", np.int64, ints)
        self.extras = {
            str(k): _typed(f"extras['{k}']", v, "fiu", np.float64, "a numeric dtype") for k, v in (extras or {}).items()
        }
        self.routed_experts = None if routed_experts is None else _routes(routed_experts, self.input_ids.size)
        flat_routes = np.zeros(0, np.int64) if self.routed_experts is None else self.routed_experts.reshape(-1)
        self._native = _native.PackedBatch(
            self.input_ids, self.labels, self.seq_lens, self.loss_mask, self.position_ids, self.extras, flat_routes
        )

    @classmethod
    def _from_native(cls, nb):
        return cls(nb.input_ids, nb.seq_lens, nb.labels, nb.loss_mask, nb.position_ids, nb.extras)

    @property
    def total_tokens(self):
        return int(self.input_ids.size)

    @property
    def num_seqs(self):
        return int(self.seq_lens.size)

    def cu_seqlens(self):
        """[S + 1] int32 sequence starts, from 0."""
        return np.concatenate([[0], np.cumsum(self.seq_lens)]).astype(np.int32)

    def shifted_loss_mask(self):
        """[T] float64: the weight of position t, which is scored on the token at t + 1
        (loss_mask[t + 1] inside a sequence, 0 at each sequence's last position): the
        positions where ModelOutputs.log_probs hold a value."""
        mask = self.loss_mask.astype(np.float64) if self.loss_mask.size else np.ones(self.total_tokens)
        out = np.zeros(self.total_tokens)
        start = 0
        for n in self.seq_lens:
            out[start : start + n - 1] = mask[start + 1 : start + n]
            start += n
        return out
