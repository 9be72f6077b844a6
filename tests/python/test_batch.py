"""PackedBatch (python/bumblebee/batch.py): numpy arrays, lists and DLPack
objects in, dtype, shape and device checks, and the shifted loss mask."""

import numpy as np
import pytest

import bumblebee as bb


class DLPackOnly:
    """An array known only through the DLPack protocol (as a torch tensor is)."""

    def __init__(self, array, device=(1, 0)):
        self._array = array
        self._device = device

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._device


def test_numpy_lists_and_dlpack_give_the_same_batch():
    ids = np.arange(7, dtype=np.int64)
    a = bb.PackedBatch(input_ids=ids, seq_lens=[4, 3])
    b = bb.PackedBatch(input_ids=list(range(7)), seq_lens=np.array([4, 3], dtype=np.int32))
    c = bb.PackedBatch(input_ids=DLPackOnly(ids), seq_lens=DLPackOnly(np.array([4, 3])))
    for batch in (a, b, c):
        assert batch.input_ids.dtype == np.int64 and batch.total_tokens == 7 and batch.num_seqs == 2
        np.testing.assert_array_equal(batch.input_ids, ids)
        np.testing.assert_array_equal(batch.cu_seqlens(), [0, 4, 7])
    assert bb.PackedBatch(input_ids=ids).num_seqs == 1   # no seq_lens: one sequence


def test_shifted_loss_mask_scores_the_next_token_within_each_sequence():
    batch = bb.PackedBatch(input_ids=np.arange(7), seq_lens=[4, 3], loss_mask=[1, 1, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(batch.shifted_loss_mask(), [1, 0, 1, 0, 1, 1, 0])
    np.testing.assert_array_equal(bb.PackedBatch(input_ids=np.arange(3)).shifted_loss_mask(), [1, 1, 0])


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(input_ids=np.arange(4, dtype=np.float32), seq_lens=[4]), "input_ids: dtype float32"),
        (dict(input_ids=np.arange(4), seq_lens=[2.0, 2.0]), "seq_lens: dtype float64"),
        (dict(input_ids=np.arange(4).reshape(2, 2), seq_lens=[4]), r"input_ids: expected a 1-D array, got shape \(2, 2\)"),
        (dict(input_ids=np.arange(4), seq_lens=[4], loss_mask=["a"] * 4), "loss_mask: dtype <U1"),
        (dict(input_ids=np.arange(4), seq_lens=[3]), "seq_lens sum to 3 but input_ids holds 4"),
        (dict(input_ids=np.arange(4), seq_lens=[4], labels=[1, 2]), "labels has 2 entries"),
        (dict(input_ids=np.arange(4), seq_lens=[4], extras={"adv": ["x"] * 4}), r"extras\['adv'\]"),
        (dict(input_ids=DLPackOnly(np.arange(4), device=(2, 0)), seq_lens=[4]), r"DLPack device \(2, 0\)"),
    ],
)
def test_bad_arrays_are_errors_naming_the_field(fields, message):
    with pytest.raises(bb.Error, match=message):
        bb.PackedBatch(**fields)
