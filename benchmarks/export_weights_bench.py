"""Weight export for RL, measured: a model built from HF_DIR (random init, no
checkpoint read) streamed through Runtime.export_weights in buckets to host
numpy arrays, and, with torch, on to tensors on the model's GPU (what an RL
trainer hands to an inference engine on the same device). Prints one JSON
line per target with seconds and GB/s (bytes of the exported tensors).

    PYTHONPATH=build/python python3 benchmarks/export_weights_bench.py configs/qwen3-1.7b \\
        [--device cuda] [--dtype bfloat16] [--bucket-bytes 536870912] [--repeats 3] \\
        [--targets host_numpy gpu_tensor]

torch, when a target needs it, is imported before bumblebee (docs/python.md:
the first import supplies libnccl.so.2 to both).
"""

import argparse
import json
import time

import numpy as np


def stream(rt, h, args, consume):
    """(seconds, bytes, tensors) of one export whose every tensor goes to consume(name, array)."""
    t0 = time.perf_counter()
    nbytes = count = 0
    for name, array in rt.export_weights(h, dtype=args.dtype, bucket_bytes=args.bucket_bytes):
        consume(name, array)
        nbytes += array.nbytes
        count += 1
    return time.perf_counter() - t0, nbytes, count


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("hf_dir")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--bucket-bytes", type=int, default=512 << 20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--targets", nargs="+", default=["host_numpy", "gpu_tensor"], choices=["host_numpy", "gpu_tensor"])
    args = p.parse_args()
    torch = None
    if "gpu_tensor" in args.targets:
        if not args.device.startswith("cuda"):
            p.error("--targets gpu_tensor needs --device cuda")
        import torch
    import bumblebee as bb

    dtype = "auto" if args.device == "cuda" else "float32"
    rt = bb.create_runtime(
        bb.RuntimeConfig(hf_path=args.hf_dir, backend_cfg=bb.BBConfig(load_hf_weights=False, device=args.device, dtype=dtype))
    )
    h = rt.build_model()

    targets = {}
    if "host_numpy" in args.targets:
        targets["host_numpy"] = lambda name, a: None
    if torch is not None:
        gpu = torch.device(args.device if ":" in args.device else "cuda:0")
        kept = {}

        def to_gpu(name, a):
            host = torch.from_numpy(a.view(np.uint16) if a.dtype.itemsize == 2 else a)
            t = host.to(gpu, non_blocking=False)
            kept[name] = t.view(torch.bfloat16) if a.dtype.itemsize == 2 else t

        targets["gpu_tensor"] = to_gpu
    for target, consume in targets.items():
        stream(rt, h, args, consume)   # warm-up: first-touch of host pages, the bucket buffers
        best = None
        for _ in range(args.repeats):
            if target == "gpu_tensor":
                kept.clear()
            seconds, nbytes, count = stream(rt, h, args, consume)
            if target == "gpu_tensor":
                torch.cuda.synchronize(gpu)
            best = seconds if best is None else min(best, seconds)
        print(
            json.dumps(
                {
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
