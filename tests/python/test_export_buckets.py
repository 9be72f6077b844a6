"""export_weights' bucket memory (bumblebee/runtime/bucket_buffers.h): every
tensor equal to the model's bit for bit in each dtype, arrays of an earlier
bucket kept by the caller intact after later buckets reuse or replace the
buffers, and the device target (DLPack over the model's GPU; skipped without
a GPU, an error on a CPU runtime)."""

import numpy as np
import pytest

import bumblebee as bb
from conftest import FIXTURES, read_safetensors, ref_config


def bf16_bits(f32):
    """Round-to-nearest-even float32 -> bfloat16 bits, as core/half.h."""
    bits = np.ascontiguousarray(f32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.mark.parametrize("bucket_bytes", [1, 1000, None])
def test_every_bucket_equals_the_model_bit_for_bit(bucket_bytes):
    on_disk = read_safetensors(FIXTURES / "qwen3_tp" / "model.safetensors")
    rt = bb.create_runtime(ref_config("qwen3_tp"))
    h = rt.build_model()
    for name, array in rt.export_weights(h, bucket_bytes=bucket_bytes):
        assert array.dtype == np.float64 and array.tobytes() == on_disk[name].tobytes(), name
    f32_rt = bb.create_runtime(ref_config("qwen3_tp", "backend=bb", "backend.dtype=float32"))
    h32 = f32_rt.build_model()
    for name, array in f32_rt.export_weights(h32, dtype="float32", bucket_bytes=bucket_bytes):
        assert array.tobytes() == on_disk[name].astype(np.float32).tobytes(), name
    for name, array in f32_rt.export_weights(h32, dtype="bfloat16", bucket_bytes=bucket_bytes):
        assert np.array_equal(array.view(np.uint16), bf16_bits(on_disk[name].astype(np.float32))), name


def test_arrays_kept_from_an_earlier_bucket_stay_intact():
    """Small buckets, so the two buffers are taken in turn many times: what the
    caller keeps is never overwritten, and what it drops is reused."""
    rt = bb.create_runtime(ref_config("qwen3_tp"))
    h = rt.build_model()
    kept, copies = {}, {}
    for i, (name, array) in enumerate(rt.export_weights(h, bucket_bytes=1000)):
        if i % 3 == 0:
            kept[name] = array
            copies[name] = array.copy()
    assert len(kept) > 2
    for other in rt.export_weights(h, bucket_bytes=1000):   # another export over the same memory pool
        pass
    for name, array in kept.items():
        assert np.array_equal(array, copies[name]), name


def test_a_bucket_held_while_the_next_is_gathered():
    """The generator hands out bucket k while the worker gathers bucket k+1:
    every array of a bucket is still right when the caller reads it last."""
    rt = bb.create_runtime(ref_config("qwen3_tp"))
    h = rt.build_model()
    on_disk = read_safetensors(FIXTURES / "qwen3_tp" / "model.safetensors")
    held = []
    for name, array in rt.export_weights(h, bucket_bytes=4096):
        held.append((name, array))
        if len(held) == 4:
            assert all(a.tobytes() == on_disk[n].tobytes() for n, a in held)
            held.clear()


def test_the_device_target_needs_a_gpu_runtime():
    rt = bb.create_runtime(ref_config("qwen3_tp"))
    with pytest.raises(bb.Error, match="device target needs a GPU runtime"):
        next(rt.export_weights(rt.build_model(), device="cuda"))
    with pytest.raises(bb.Error, match="device 'gpu' is not one of cpu, cuda"):
        next(rt.export_weights(rt.build_model(), device="gpu"))
    assert len(dict(rt.export_weights(rt.build_model()))) > 0   # still usable


def test_the_device_target_hands_out_gpu_tensors_without_a_copy():
    try:
        import torch
    except ImportError as e:   # absent, or a CUDA torch that cannot load beside this build's NCCL
        pytest.skip(f"torch: {e}")
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    cfg = bb.RuntimeConfig(
        hf_path=str(FIXTURES / "qwen3_tp"), backend_cfg=bb.BBConfig(device="cuda", dtype="auto")
    )
    try:
        rt = bb.create_runtime(cfg)
    except bb.Error as e:   # a CPU-only build
        pytest.skip(str(e))
    h = rt.build_model()
    host = {name: a.view(np.uint16).copy() for name, a in rt.export_weights(h, dtype="bfloat16", bucket_bytes=4096)}
    seen = 0
    for name, obj in rt.export_weights(h, dtype="bfloat16", bucket_bytes=4096, device="cuda"):
        t = torch.from_dlpack(obj)
        assert t.is_cuda and t.dtype == torch.bfloat16
        assert torch.from_dlpack(obj).data_ptr() == t.data_ptr()   # a view of the device bucket
        assert np.array_equal(t.view(torch.int16).cpu().numpy().view(np.uint16), host[name]), name
        seen += 1
    assert seen == len(host)
