"""Weight export for RL, measured: a model built from HF_DIR (random init, no
checkpoint read) streamed through Runtime.export_weights in buckets to one of
three targets, and prints one JSON line per target with seconds and GB/s
(bytes of the exported tensors; for a GPU target also whether the engine's
tensors equal a host export bit for bit):

  host_numpy  numpy arrays over pinned host buckets (the caller does nothing)
  gpu_tensor  those arrays copied into torch tensors on the model's GPU (an
              inference engine's weights, allocated once; what a trainer does
              with a host export)
  gpu_dlpack  export_weights(device="cuda"): device buckets taken by
              torch.from_dlpack without a copy and copied into the same
              engine tensors (a colocated engine)

    PYTHONPATH=build/python python3 benchmarks/export_weights_bench.py configs/qwen3-1.7b \\
        [--device cuda] [--dtype bfloat16] [--bucket-bytes 536870912] [--repeats 3] \\
        [--targets host_numpy gpu_tensor gpu_dlpack]

torch, when a target needs it, is imported before bumblebee (docs/python.md:
the first import supplies libnccl.so.2 to both).
"""

import argparse
import json
import time

import numpy as np

GPU_TARGETS = ("gpu_tensor", "gpu_dlpack")


def stream(rt, h, args, consume, device, finish):
    """(seconds, bytes, tensors) of one export whose every tensor goes to
    consume(name, tensor) (which returns its bytes), up to finish() (the GPU's
    queued copies done)."""
    t0 = time.perf_counter()
    nbytes = count = 0
    for name, tensor in rt.export_weights(h, dtype=args.dtype, bucket_bytes=args.bucket_bytes, device=device):
        nbytes += consume(name, tensor)
        count += 1
    finish()
    return time.perf_counter() - t0, nbytes, count


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("hf_dir")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--bucket-bytes", type=int, default=512 << 20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--targets", nargs="+", default=["host_numpy", *GPU_TARGETS], choices=["host_numpy", *GPU_TARGETS]
    )
    args = p.parse_args()
    torch = None
    if any(t in GPU_TARGETS for t in args.targets):
        if not args.device.startswith("cuda"):
            p.error(f"--targets {' '.join(t for t in args.targets if t in GPU_TARGETS)} needs --device cuda")
        import torch
    import bumblebee as bb

    dtype = "auto" if args.device == "cuda" else "float32"
    rt = bb.create_runtime(
        bb.RuntimeConfig(hf_path=args.hf_dir, backend_cfg=bb.BBConfig(load_hf_weights=False, device=args.device, dtype=dtype))
    )
    h = rt.build_model()

    targets = {"host_numpy": ("cpu", lambda name, a: a.nbytes)}
    if torch is not None:
        gpu = torch.device(args.device if ":" in args.device else "cuda:0")
        engine = {}   # the inference engine's weights: allocated by the first export, then overwritten

        def into_engine(name, t):
            dst = engine.get(name)
            if dst is None:
                dst = engine[name] = torch.empty(t.shape, dtype=t.dtype, device=gpu)
            dst.copy_(t)
            return t.numel() * t.element_size()

        def host_to_gpu(name, a):
            host = torch.from_numpy(a.view(np.uint16) if a.dtype.itemsize == 2 else a)
            return into_engine(name, host.view(torch.bfloat16) if a.dtype.itemsize == 2 else host)

        def engine_matches_host():
            """Every engine tensor equals a fresh host export bit for bit."""
            for name, a in rt.export_weights(h, dtype=args.dtype, bucket_bytes=args.bucket_bytes):
                bits = a.view(np.int16) if a.dtype.itemsize == 2 else a
                got = engine[name].view(torch.int16) if a.dtype.itemsize == 2 else engine[name]
                if not torch.equal(got.cpu(), torch.from_numpy(bits)):
                    return False
            return True

        targets["gpu_tensor"] = ("cpu", host_to_gpu)
        targets["gpu_dlpack"] = ("cuda", lambda name, obj: into_engine(name, torch.from_dlpack(obj)))
    for target in args.targets:
        device, consume = targets[target]
        finish = (lambda: None) if torch is None else (lambda: torch.cuda.synchronize(gpu))
        stream(rt, h, args, consume, device, finish)   # warm-up: the pinned host buckets, the engine's tensors
        best = None
        for _ in range(args.repeats):
            seconds, nbytes, count = stream(rt, h, args, consume, device, finish)
            best = seconds if best is None else min(best, seconds)
        checked = {} if target == "host_numpy" else {"bit_identical": engine_matches_host()}
        print(
            json.dumps(
                {
                    **checked,
                    "bench": "export_weights",
                    "model": args.hf_dir.rstrip("/").split("/")[-1],
                    "target": target,
                    "dtype": args.dtype,
                    "bucket_bytes": args.bucket_bytes,
                    "tensors": count,
                    "bytes": nbytes,
                    "seconds": round(best, 4),
                    "GB_per_s": round(nbytes / best / 1e9, 3),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
