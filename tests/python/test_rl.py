"""The RL-facing parts of the runtime API from Python: bucketed weight export
(export_weights with dtype, bucket_bytes, rank0_only) and MoE router replay
(forward_backward(router_replay=...) with PackedBatch.routed_experts)."""

import numpy as np
import pytest

import bumblebee as bb
from conftest import ADAMW_WORDS, FIXTURES, fixture_batch, read_safetensors, ref_config

MOE = "qwen3_moe_experts"


def test_export_weights_has_every_hf_name_and_shape():
    rt = bb.create_runtime(ref_config("qwen3_tp"))
    on_disk = read_safetensors(FIXTURES / "qwen3_tp" / "model.safetensors")
    for dtype, np_dtype in ((None, np.float64), ("float64", np.float64), ("float32", np.float32)):
        exported = dict(rt.export_weights(rt.build_model(), dtype=dtype, bucket_bytes=1000))
        assert set(exported) == set(on_disk)
        for name, array in exported.items():
            assert array.shape == on_disk[name].shape and array.dtype == np_dtype, name
            assert np.array_equal(array.astype(np.float64), on_disk[name].astype(np_dtype).astype(np.float64)), name


def test_export_weights_in_bfloat16_rounds_the_float32_values():
    rt = bb.create_runtime(ref_config("qwen3_tp", "backend=bb", "backend.dtype=float32"))
    h = rt.build_model()
    f32 = dict(rt.export_weights(h, dtype="float32"))
    for name, array in rt.export_weights(h, dtype="bfloat16"):
        bits = array.view(np.uint16)
        assert bits.shape == f32[name].shape
        widened = (bits.astype(np.uint32) << 16).view(np.float32)
        assert np.all(np.abs(widened - f32[name]) <= np.abs(f32[name]) * 2.0**-8), name


def test_export_weights_buckets_stay_under_bucket_bytes():
    """The native export hands over buckets; no bucket of several tensors exceeds bucket_bytes."""
    rt = bb.create_runtime(ref_config("qwen3_tp"))
    h = rt.build_model()
    sizes = {name: a.nbytes for name, a in rt.export_weights(h, dtype="float32")}
    limit = 4 * max(sizes.values()) // 3
    buckets = []

    def sink(bucket):
        buckets.append([(n, a.nbytes) for n, a in bucket])

    rt._native.export_weights(h._native, sink, "float32", limit, False, False)
    assert [n for b in buckets for n, _ in b] == list(sizes)
    assert len(buckets) > 1
    for b in buckets:
        assert len(b) == 1 or sum(n for _, n in b) <= limit, b


def test_export_weights_closed_early_leaves_the_runtime_usable():
    rt = bb.create_runtime(ref_config("qwen3_tp"))
    h = rt.build_model()
    gen = rt.export_weights(h, bucket_bytes=1)
    first = next(gen)
    gen.close()
    again = dict(rt.export_weights(h))
    assert np.array_equal(again[first[0]], first[1])


def test_export_weights_rejects_a_bad_bucket_size():
    rt = bb.create_runtime(ref_config("qwen3_tp"))
    with pytest.raises(bb.Error, match="bucket_bytes must be positive"):
        next(rt.export_weights(rt.build_model(), bucket_bytes=0))


def moe_step(batch, router_replay):
    rt = bb.create_runtime(ref_config(MOE, *ADAMW_WORDS))
    h = rt.build_model()
    with rt.train_mode(h):
        rt.zero_grad(h)
        r = rt.forward_backward(h, batch, num_microbatches=2, router_replay=router_replay)
        _, grad_norm, _ = rt.optimizer_step(h)
    return r, grad_norm, dict(rt.export_weights(h))


def test_router_replay_of_the_recorded_routes_gives_the_same_step():
    batch = fixture_batch(MOE)
    recorded, norm_rec, weights_rec = moe_step(batch, "record")
    routes = np.concatenate([o.routed_experts for o in recorded.model_output])
    assert routes.shape == (batch.total_tokens, 2, 2) and routes.dtype == np.int64
    assert routes.min() >= 0 and routes.max() < 6
    replay_batch = bb.PackedBatch(batch.input_ids, batch.seq_lens, routed_experts=routes)
    replayed, norm_rep, weights_rep = moe_step(replay_batch, "replay")
    plain, norm_plain, _ = moe_step(batch, None)
    assert replayed.loss == recorded.loss == plain.loss
    assert norm_rep == norm_rec == norm_plain
    assert all(np.array_equal(weights_rep[n], weights_rec[n]) for n in weights_rec)
    assert all(o.routed_experts is None for o in replayed.model_output + plain.model_output)


def test_router_replay_with_other_routes_changes_the_loss():
    batch = fixture_batch(MOE)
    recorded, _, _ = moe_step(batch, "record")
    routes = np.concatenate([o.routed_experts for o in recorded.model_output])
    moved = bb.PackedBatch(batch.input_ids, batch.seq_lens, routed_experts=(routes + 1) % 6)
    replayed, _, _ = moe_step(moved, "replay")
    assert replayed.loss != recorded.loss


def test_router_replay_bad_input():
    batch = fixture_batch(MOE)
    rt = bb.create_runtime(ref_config(MOE))
    h = rt.build_model()
    with pytest.raises(bb.Error, match="needs PackedBatch.routed_experts"):
        rt.forward_backward(h, batch, forward_only=True, router_replay="replay")
    with pytest.raises(bb.Error, match="router_replay 'playback'"):
        rt.forward_backward(h, batch, forward_only=True, router_replay="playback")
    with pytest.raises(bb.Error, match="PackedBatch.routed_experts: shape"):
        bb.PackedBatch(batch.input_ids, batch.seq_lens, routed_experts=np.zeros((3, 2, 2), np.int64))
    wrong = bb.PackedBatch(batch.input_ids, batch.seq_lens, routed_experts=np.full((batch.total_tokens, 2, 2), 9))
    with pytest.raises(bb.Error, match="9"):
        rt.forward_backward(h, wrong, forward_only=True, router_replay="replay")
    dense = bb.create_runtime(ref_config("qwen3_tp"))
    with pytest.raises(bb.Error, match="needs a model with MoE layers"):
        dense.forward_backward(dense.build_model(), fixture_batch("qwen3_tp"), forward_only=True, router_replay="record")
    assert rt.forward_backward(h, batch, forward_only=True).loss > 0
