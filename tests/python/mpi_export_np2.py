"""export_weights under mpirun on 2 ranks, tp=2 (MPI starts by itself): every
bucket's tensors gathered over tp equal the fixture bit for bit on both ranks
in small buckets (the two bucket buffers taken in turn many times), arrays
kept from earlier buckets stay intact, and rank0_only yields nothing on rank 1
while it still takes part in every gather.

    mpirun -np 2 -x PYTHONPATH=build/python .venv-ci/bin/python tests/python/mpi_export_np2.py
"""

import numpy as np

import bumblebee as bb
from conftest import FIXTURES, read_safetensors

FIXTURE = "qwen3_tp"
WORDS = ["backend=bb", f"hf_path={FIXTURES / FIXTURE}", "backend.dtype=float64", "backend.parallel.tp=2"]


def main():
    rt = bb.create_runtime(bb.RuntimeConfig.from_words(WORDS))
    h = rt.build_model()
    assert rt.world_size == 2, rt.world_size
    on_disk = read_safetensors(FIXTURES / FIXTURE / "model.safetensors")
    kept, names = {}, []
    for i, (name, array) in enumerate(rt.export_weights(h, bucket_bytes=1000)):
        assert array.tobytes() == on_disk[name].tobytes(), name
        names.append(name)
        if i % 3 == 0:
            kept[name] = array
    assert set(names) == set(on_disk) and len(kept) > 2
    assert all(a.tobytes() == on_disk[n].tobytes() for n, a in kept.items())
    only0 = dict(rt.export_weights(h, dtype="float32", bucket_bytes=1000, rank0_only=True))
    assert set(only0) == (set(on_disk) if rt.world_rank == 0 else set())
    assert all(a.tobytes() == on_disk[n].astype(np.float32).tobytes() for n, a in only0.items())
    # Closed early on rank 0 only: rank 1 runs to the end, and the collectives still match.
    gen = rt.export_weights(h, bucket_bytes=1000)
    if rt.world_rank == 0:
        next(gen)
        gen.close()
    else:
        assert len(list(gen)) == len(on_disk)
    assert len(dict(rt.export_weights(h))) == len(on_disk)
    if rt.world_rank == 0:
        print("python export np=2 tp=2: bit for bit, kept arrays intact, rank0_only: ok")


if __name__ == "__main__":
    main()
