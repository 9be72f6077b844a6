"""create_runtime and Runtime: the runtime API of the seed library over the
native one, with numpy arrays in and out.

    rt = create_runtime(RuntimeConfig(hf_path=DIR))
    h = rt.build_model()
    with rt.train_mode(h):
        rt.zero_grad(h)
        r = rt.forward_backward(h, batch, loss_fn=None, num_microbatches=1)
        ok, grad_norm, num_zeros = rt.optimizer_step(h)
        rt.lr_scheduler_step(h)

Every failure is a bumblebee.Error (a RuntimeError) with the library's
message; the runtime stays usable after one. Calls out of order are errors
too: optimizer_step with no forward_backward since the last step or
zero_grad, a forward_backward with gradients in eval mode.
Under mpirun every rank runs the same program (MPI starts by itself) and each
dp rank passes its own part of the global batch (ModelHandle.dp_rank/dp_size).
"""

import contextlib
import json
import queue
import threading

import numpy as np

from . import _bumblebee as _native
from .config import RuntimeConfig
from .loss import LossAdapter
from .outputs import ForwardResult, LossContext, ModelOutputs


class ModelHandle:
    """A built model: dp_rank, dp_size, config (the model's normalised config), training."""

    def __init__(self, native):
        self._native = native
        self._has_grads = False

    @property
    def dp_rank(self):
        return self._native.dp_rank

    @property
    def dp_size(self):
        return self._native.dp_size

    @property
    def config(self):
        return json.loads(self._native.config)

    @property
    def training(self):
        return self._native.training

    @property
    def vocab_size(self):
        return self._native.vocab_size


class Runtime:
    """The training calls of one model family on one parallel layout."""

    def __init__(self, cfg):
        self.config = cfg
        self._native = _native.Runtime(cfg.to_words())

    @property
    def world_rank(self):
        return self._native.world_rank

    @property
    def world_size(self):
        return self._native.world_size

    def build_model(self, backend_cfg=None):
        """The model of hf_path; backend_cfg (a BBConfig) replaces the runtime's for this model."""
        if backend_cfg is None:
            return ModelHandle(self._native.build_model())
        return ModelHandle(self._native.build_model_with(RuntimeConfig(backend_cfg=backend_cfg).to_words()))

    @contextlib.contextmanager
    def train_mode(self, h):
        mode = self._native.train_mode(h._native)
        try:
            yield h
        finally:
            mode.restore()

    @contextlib.contextmanager
    def eval_mode(self, h):
        """No gradients: forward_backward needs forward_only=True here."""
        mode = self._native.eval_mode(h._native)
        try:
            yield h
        finally:
            mode.restore()

    def zero_grad(self, h):
        self._native.zero_grad(h._native)
        h._has_grads = False

    def to(self, h, device, model=True, optimizer=True, grad=True):
        """Offload: moves the chosen parts of the model's state (parameters,
        optimizer master weights and moments, gradients) to pinned host memory
        (device="cpu") and gives the device memory back to the driver, or brings
        them back (device="cuda"). Calls that need a part fail until it is back;
        training after a round trip is bit-identical. On a CPU runtime the state
        already is in host memory and to(h, "cpu") does nothing."""
        self._native.to(h._native, device, model, optimizer, grad)

    def forward_backward(
        self,
        h,
        batch,
        loss_fn=None,
        num_microbatches=1,
        forward_only=False,
        *,
        calculate_entropy=False,
        router_replay=None,
    ):
        """Forward (and, unless forward_only, backward) of `batch` in num_microbatches
        microbatches of whole sequences; gradients accumulate until zero_grad.
        loss_fn: None for the built-in masked mean cross entropy, or a callable
        (bumblebee.loss documents both forms). forward_only returns per-token
        log-probs in model_output. calculate_entropy: model_output[i].entropy
        holds each position's entropy at the temperature (forward_only or with
        a loss_fn, which may then take its gradient: bumblebee.loss).
        router_replay (MoE models): "record" returns
        each microbatch's routes in model_output[i].routed_experts ([T, MoE
        layers, k] int64); "replay" routes every token as batch.routed_experts says."""
        if router_replay not in (None, "record", "replay"):
            raise _native.Error(f"forward_backward: router_replay '{router_replay}' is not one of None, record, replay")
        if router_replay == "replay" and batch.routed_experts is None:
            raise _native.Error('forward_backward(router_replay="replay") needs PackedBatch.routed_experts')
        if not forward_only and not h.training:
            raise _native.Error(
                "forward_backward with gradients in eval mode: pass forward_only=True, or call it under train_mode"
            )
        adapter = None
        if loss_fn is not None:
            local_tokens = float(batch.shifted_loss_mask().sum())
            ctx = LossContext(
                temperature=self.config.backend_cfg.temperature,
                calculate_entropy=calculate_entropy,
                num_tokens=int(round(h._native.dp_all_reduce_sum(local_tokens))),
                num_microbatches=num_microbatches,
                forward_only=forward_only,
                source_batch=batch,
            )
            adapter = LossAdapter(loss_fn, ctx)
        r = self._native.forward_backward(
            h._native, batch._native, adapter, num_microbatches, forward_only, calculate_entropy, router_replay or ""
        )
        if not forward_only:
            h._has_grads = True
        layers, top_k, _ = h._native.router_shape
        for o in r["model_output"]:
            if o["routed_experts"] is not None:
                o["routed_experts"] = o["routed_experts"].reshape(-1, layers, top_k)
        return ForwardResult(
            loss=r["loss"],
            metrics=r["metrics"],
            model_output=[ModelOutputs(**o) for o in r["model_output"]],
            aux_loss=r["aux_loss"],
            num_tokens=r["num_tokens"],
        )

    def optimizer_step(self, h):
        """One AdamW step -> (update_successful, grad_norm, num_zeros_in_grad)."""
        if not h._has_grads:
            raise _native.Error(
                "optimizer_step with no gradients: call forward_backward (with gradients) after zero_grad or the last step"
            )
        ok, grad_norm, num_zeros = self._native.optimizer_step(h._native)
        h._has_grads = False
        return ok, grad_norm, num_zeros

    def lr_scheduler_step(self, h):
        """Advances the schedule; returns the learning rate for the next step."""
        return self._native.lr_scheduler_step(h._native)

    def current_lr(self, h):
        return self._native.current_lr(h._native)

    def save_checkpoint(self, h, path):
        """Training checkpoint (collective): model, optimizer state, step counters."""
        self._native.save_checkpoint(h._native, str(path))

    def load_checkpoint(self, h, path):
        """Restores a save_checkpoint; returns the optimizer steps taken."""
        return self._native.load_checkpoint(h._native, str(path))

    def save_hf_checkpoint(self, h, path):
        """The model as an HF checkpoint directory (config.json + safetensors), from rank 0."""
        self._native.save_hf_checkpoint(h._native, str(path))

    def export_weights(self, h, dtype=None, bucket_bytes=None, rank0_only=False, device="cpu"):
        """Yields (hf_name, tensor) in HF naming, full tensors gathered over tp,
        pp and ep, one bucket of at most bucket_bytes at a time (None:
        export.bucket_bytes; a larger tensor comes alone) while the next bucket
        is gathered. device="cpu": numpy arrays, views into a bucket of pinned
        host memory (on a GPU runtime gathered on the device and copied in one
        transfer); device="cuda": objects with __dlpack__ over a bucket on the
        model's GPU (torch.from_dlpack takes them without a copy), for an
        inference engine on the same device. Memory: two buckets while the
        caller drops each bucket's tensors before it takes the one after next;
        a tensor kept longer stays valid (its bucket is then not reused).
        Collective: every rank calls it and runs it to the end (or closes it);
        rank0_only=True yields nothing on the other ranks. dtype: None keeps
        each tensor's dtype (bfloat16 on CUDA), or "bfloat16", "float32",
        "float64" (cast on the device). bfloat16 numpy arrays have the
        ml_dtypes.bfloat16 dtype when ml_dtypes is installed, else dtype uint16
        holding the bits (view them with torch: t.view(torch.bfloat16)). No
        other runtime call may run while the generator is open."""
        if dtype not in (None, "bfloat16", "float32", "float64"):
            raise _native.Error(f"export_weights: dtype '{dtype}' is not supported (None, bfloat16, float32 or float64)")
        if bucket_bytes is not None and bucket_bytes <= 0:
            raise _native.Error(f"export_weights: bucket_bytes must be positive, got {bucket_bytes}")
        if device not in ("cpu", "cuda"):
            raise _native.Error(f"export_weights: device '{device}' is not one of cpu, cuda")
        yield from _exported_buckets(
            self._native, h._native, dtype or "", bucket_bytes or 0, rank0_only, device == "cuda"
        )

    def logits(self, h, batch):
        """Full-vocabulary logits [T, V] (float64) of a batch, for validation."""
        return self._native.logits(h._native, batch._native)


def _bfloat16_dtype():
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes.bfloat16


def _exported_buckets(native, handle, dtype, bucket_bytes, rank0_only, to_device):
    """The native bucketed export, run on a worker thread without the GIL,
    which gathers the next bucket while the caller works on this one. The
    worker waits before the bucket after next until the caller has let go of
    the one before (after it yielded the first tensor of the current bucket,
    so the caller's loop variable no longer holds the older one): the native
    side then reuses that bucket's buffer instead of allocating a fresh one.
    Only the worker calls into MPI while the generator is open. Closing the
    generator early lets the worker finish the export without handing out the
    rest, so every rank's collectives still match."""
    handoff = queue.Queue(maxsize=1)
    released = threading.Semaphore(0)
    draining = threading.Event()
    failure = []

    def sink(bucket):
        if draining.is_set():
            return
        handoff.put(bucket)
        released.acquire()

    def work():
        try:
            native.export_weights(handle, sink, dtype, bucket_bytes, rank0_only, to_device)
        except BaseException as e:   # re-raised on the caller's thread
            failure.append(e)
        handoff.put(None)

    bf16 = _bfloat16_dtype() if dtype in ("", "bfloat16") and not to_device else None
    worker = threading.Thread(target=work, name="bumblebee-export", daemon=True)
    worker.start()
    bucket = array = None
    done = False
    try:
        first = True
        while (bucket := handoff.get()) is not None:
            if first:
                released.release()   # nothing older is held: the worker may gather the next bucket now
            pending = not first
            first = False
            for name, array in bucket:
                yield name, array.view(bf16) if bf16 is not None and array.dtype == np.uint16 else array
                if pending:
                    released.release()
                    pending = False
            array = None
        done = True
    finally:
        bucket = array = None
        draining.set()
        released.release()
        while not done:
            done = handoff.get() is None
        worker.join()
    if failure:
        raise failure[0]


def create_runtime(cfg=None, *overrides):
    """A Runtime from a RuntimeConfig and key=value overrides ("backend.parallel.tp=2")."""
    cfg = RuntimeConfig() if cfg is None else cfg
    return Runtime(cfg.override(*overrides) if overrides else cfg)
