"""The Python bindings under mpirun, tp=2 x dp=2 on 4 ranks (MPI starts by
itself: no mpi4py). Each dp rank trains on its own sequence of the qwen3_tp
fixture in float64; the run must reproduce HF's reference (as the C++ parallel
runs do), a numpy loss_fn must reproduce the built-in loss's step, and
export_weights must gather the full HF tensors on every rank (also in
buckets), and the vocab-parallel entropy at tp=2 must equal tp=1's.

    mpirun -np 4 -x PYTHONPATH=build/python .venv-ci/bin/python tests/python/mpi_tp2_dp2.py
"""

import numpy as np

import bumblebee as bb
from conftest import ADAMW_WORDS, FIXTURES, fixture_batch, fixture_rows, read_safetensors, reference, rel_err

FIXTURE = "qwen3_tp"
WORDS = ["backend=bb", f"hf_path={FIXTURES / FIXTURE}", "backend.dtype=float64", "backend.parallel.tp=2", *ADAMW_WORDS]


def mean_nll(outputs, batch, ctx):
    mask = batch.shifted_loss_mask()
    return -np.sum(mask * outputs.log_probs) / ctx.num_tokens, {}, -mask / ctx.num_tokens


def main():
    rt = bb.create_runtime(bb.RuntimeConfig.from_words(WORDS))
    h = rt.build_model()
    assert rt.world_size == 4 and h.dp_size == 2, (rt.world_size, h.dp_size)
    rows = fixture_rows(FIXTURE)
    mine = fixture_batch(FIXTURE, rows[h.dp_rank :: h.dp_size])

    on_disk = read_safetensors(FIXTURES / FIXTURE / "model.safetensors")
    exported = dict(rt.export_weights(h))
    assert set(exported) == set(on_disk)
    assert all(np.array_equal(exported[n], on_disk[n]) for n in on_disk)
    # Bucketed (each bucket gathered over tp, one at a time) gives the same tensors; rank0_only only on rank 0.
    bucketed = dict(rt.export_weights(h, bucket_bytes=1000))
    assert list(bucketed) == list(exported) and all(np.array_equal(bucketed[n], on_disk[n]) for n in on_disk)
    only0 = dict(rt.export_weights(h, dtype="float32", bucket_bytes=1000, rank0_only=True))
    assert set(only0) == (set(on_disk) if rt.world_rank == 0 else set())
    assert all(np.array_equal(only0[n], on_disk[n].astype(np.float32)) for n in only0)

    # Entropy from tp=2's partial sums equals the unsplit one (tp=1, each rank its own dp replica).
    tp1 = bb.create_runtime(bb.RuntimeConfig.from_words([w for w in WORDS if "parallel.tp" not in w]))
    single = tp1.forward_backward(tp1.build_model(), mine, forward_only=True, calculate_entropy=True)
    split = rt.forward_backward(h, mine, forward_only=True, calculate_entropy=True)
    assert rel_err(split.model_output[0].entropy, single.model_output[0].entropy) < 1e-12
    assert rel_err(split.model_output[0].log_probs, single.model_output[0].log_probs) < 1e-12

    ref = reference(FIXTURE)
    losses, norms = [], []
    with rt.train_mode(h):
        for _ in range(5):
            rt.zero_grad(h)
            losses.append(rt.forward_backward(h, mine).loss)
            ok, grad_norm, _ = rt.optimizer_step(h)
            assert ok
            norms.append(grad_norm)
            rt.lr_scheduler_step(h)
    assert rel_err(losses, ref["losses"]) < 1e-8, (losses, ref["losses"])
    assert abs(norms[0] - ref["grad_norm"]) < 1e-9 * ref["grad_norm"], norms[0]

    steps = {}
    for name, loss_fn in (("builtin", None), ("loss_fn", mean_nll)):
        rt = bb.create_runtime(bb.RuntimeConfig.from_words(WORDS))
        h = rt.build_model()
        with rt.train_mode(h):
            rt.zero_grad(h)
            r = rt.forward_backward(h, mine, loss_fn=loss_fn)
            _, grad_norm, _ = rt.optimizer_step(h)
        steps[name] = (r, grad_norm, dict(rt.export_weights(h)))
    (rb, nb, wb), (rc, nc, wc) = steps["builtin"], steps["loss_fn"]
    assert abs(nc - nb) < 1e-12 * nb, (nc, nb)
    assert all(rel_err(wc[n], wb[n]) < 1e-12 for n in wb)
    assert rc.num_tokens == rb.num_tokens == 20
    if rt.world_rank == 0:
        print(f"python tp=2 x dp=2: losses {losses[0]:.12f} .. {losses[-1]:.12f}, grad_norm {norms[0]:.12f}: ok")


if __name__ == "__main__":
    main()
