// The runtime API for Python: Runtime, ModelHandle, scoped train/eval modes,
// PackedBatch in, ForwardResult and exported weights out as numpy arrays, and
// a Python loss function adapted to the C++ LossFn contract.
//
// The Python package checks dtypes and shapes before calling in (so its
// errors name the field as the user wrote it); arrays arrive here as
// C-contiguous host arrays of exactly the element type each field holds.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/model/plugin.h"
#include "bumblebee/runtime/model_state.h"
#include "bumblebee/runtime/runtime.h"
#include "python/src/bindings.h"
#include "python/src/runtime_schema.h"

namespace nb = nanobind;

namespace bb::python {

namespace {

template <typename T>
using HostArray = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A numpy array that owns `values`.
template <typename T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T> values, std::vector<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape.size(), shape.data(), owner);
}

template <typename T>
nb::ndarray<nb::numpy, T> to_numpy(const std::vector<T>& values) {
  return to_numpy(values, {values.size()});
}

template <typename T>
std::vector<T> to_vector(const HostArray<T>& a) {
  return std::vector<T>(a.data(), a.data() + a.shape(0));
}

// A tensor of an export bucket as a numpy array over the bucket's pinned
// host buffer (no copy: the array keeps the buffer alive, and the export
// reuses a buffer only once no array views it); bfloat16, which numpy lacks,
// as uint16 holding the bits (bumblebee/runtime.py views it as
// ml_dtypes.bfloat16 when that is installed).
template <typename T>
nb::object host_view(const Tensor& host) {
  std::vector<size_t> shape(host.shape().begin(), host.shape().end());
  auto* owned = new Tensor(host);
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(static_cast<T*>(owned->raw()), shape.size(), shape.data(), owner));
}

nb::object tensor_to_numpy(const Tensor& host) {
  switch (host.dtype()) {
    case DType::F64: return host_view<double>(host);
    case DType::F32: return host_view<float>(host);
    case DType::BF16: return host_view<uint16_t>(host);
    default: BB_FAIL("export_weights: no numpy form for dtype ", dtype_name(host.dtype()));
  }
}

// A tensor of a device export bucket as an object with __dlpack__ and
// __dlpack_device__ (nanobind's ndarray), which torch.from_dlpack takes
// without a copy; it keeps the device bucket alive like host_view.
nb::object tensor_to_dlpack(const Tensor& t) {
  nb::dlpack::dtype dt{};
  dt.lanes = 1;
  dt.bits = uint8_t(dtype_size(t.dtype()) * 8);
  switch (t.dtype()) {
    case DType::F64:
    case DType::F32: dt.code = uint8_t(nb::dlpack::dtype_code::Float); break;
    case DType::BF16: dt.code = uint8_t(nb::dlpack::dtype_code::Bfloat); break;
    default: BB_FAIL("export_weights: no DLPack form for dtype ", dtype_name(t.dtype()));
  }
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  auto* owned = new Tensor(t);
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  return nb::cast(nb::ndarray<>(owned->raw(), shape.size(), shape.data(), owner, nullptr, dt, nb::device::cuda::value,
                                t.device().index));
}

// The Python loss adapter (bumblebee/loss.py) is called with (log_probs,
// token_loss, entropy or None, microbatch) and returns (loss, grad_log_probs
// or None, metrics, grad_entropy or None), already checked for shape, dtype
// and finiteness.
LossFn python_loss(nb::object fn) {
  if (fn.is_none()) return {};
  return [fn](const ModelOutputs& out, const PackedBatch& mb) {
    nb::object entropy = out.entropy.empty() ? nb::none() : nb::cast(to_numpy(out.entropy));
    nb::tuple r = nb::cast<nb::tuple>(
        fn(to_numpy(out.log_probs), to_numpy(out.token_loss), entropy, mb.with_defaults()));
    BB_CHECK(r.size() == 4, "loss adapter returned ", r.size(),
             " values, expected (loss, grad_log_probs, metrics, grad_entropy)");
    LossOutput lo;
    lo.loss = nb::cast<double>(r[0]);
    if (!r[1].is_none()) lo.grad_log_probs = to_vector(nb::cast<HostArray<double>>(r[1]));
    lo.metrics = nb::cast<std::map<std::string, double>>(r[2]);
    if (!r[3].is_none()) lo.grad_entropy = to_vector(nb::cast<HostArray<double>>(r[3]));
    return lo;
  };
}

nb::dict forward_result_to_python(ForwardResult&& r) {
  nb::dict d;
  d["loss"] = r.loss;
  d["aux_loss"] = r.aux_loss;
  d["num_tokens"] = r.num_tokens;
  d["metrics"] = nb::cast(r.metrics);
  nb::list outputs;
  for (ModelOutputs& o : r.model_output) {
    nb::dict od;
    od["loss"] = o.loss;
    od["log_probs"] = o.log_probs.empty() ? nb::none() : nb::cast(to_numpy(o.log_probs));
    od["token_loss"] = o.token_loss.empty() ? nb::none() : nb::cast(to_numpy(o.token_loss));
    od["entropy"] = o.entropy.empty() ? nb::none() : nb::cast(to_numpy(o.entropy));
    od["routed_experts"] = o.routed_experts.empty() ? nb::none() : nb::cast(to_numpy(o.routed_experts));
    outputs.append(od);
  }
  d["model_output"] = outputs;
  return d;
}

// train_mode / eval_mode: the C++ ModeGuard, released by restore() (the
// Python context manager's exit) rather than by the garbage collector.
struct ScopedMode {
  std::unique_ptr<ModeGuard> guard;
  void restore() { guard.reset(); }
};

void bind_packed_batch(nb::module_& m) {
  nb::class_<PackedBatch>(m, "PackedBatch")
      .def(
          "__init__",
          [](PackedBatch* b, HostArray<int64_t> input_ids, HostArray<int64_t> labels, HostArray<int64_t> seq_lens,
             HostArray<float> loss_mask, HostArray<int64_t> position_ids, nb::dict extras,
             HostArray<int64_t> routed_experts) {
            new (b) PackedBatch();
            b->input_ids = to_vector(input_ids);
            b->labels = to_vector(labels);
            b->seq_lens = to_vector(seq_lens);
            b->loss_mask = to_vector(loss_mask);
            b->position_ids = to_vector(position_ids);
            for (auto [k, v] : extras) b->extras[nb::cast<std::string>(k)] = to_vector(nb::cast<HostArray<double>>(v));
            b->routed_experts = to_vector(routed_experts);
            b->validate();
          },
          nb::arg("input_ids"), nb::arg("labels"), nb::arg("seq_lens"), nb::arg("loss_mask"), nb::arg("position_ids"),
          nb::arg("extras"), nb::arg("routed_experts"))
      .def_prop_ro("input_ids", [](const PackedBatch& b) { return nb::cast(to_numpy(b.input_ids)); })
      .def_prop_ro("labels", [](const PackedBatch& b) { return nb::cast(to_numpy(b.labels)); })
      .def_prop_ro("seq_lens", [](const PackedBatch& b) { return nb::cast(to_numpy(b.seq_lens)); })
      .def_prop_ro("loss_mask", [](const PackedBatch& b) { return nb::cast(to_numpy(b.loss_mask)); })
      .def_prop_ro("position_ids", [](const PackedBatch& b) { return nb::cast(to_numpy(b.position_ids)); })
      .def_prop_ro("routed_experts", [](const PackedBatch& b) { return nb::cast(to_numpy(b.routed_experts)); })
      .def_prop_ro("extras", [](const PackedBatch& b) {
        nb::dict d;
        for (const auto& [k, v] : b.extras) d[k.c_str()] = to_numpy(v);
        return d;
      });
}

void bind_model_handle(nb::module_& m) {
  nb::class_<ModelHandle>(m, "ModelHandle")
      .def_prop_ro("dp_rank", &ModelHandle::dp_rank)
      .def_prop_ro("dp_size", &ModelHandle::dp_size)
      .def_prop_ro("config", [](const ModelHandle& h) { return h.config().dump(); })
      .def_prop_ro("training", [](const ModelHandle& h) { return h.state().training; })
      .def_prop_ro("vocab_size", [](const ModelHandle& h) { return h.model().vocab_size(); })
      .def_prop_ro(
          "router_shape",
          [](const ModelHandle& h) {
            const ModelChunk::RouterShape s = h.model().router_shape();
            return std::make_tuple(s.moe_layers, s.top_k, s.num_experts);
          },
          "(MoE layers, experts per token, experts); zeros for a dense model.")
      .def(
          "dp_all_reduce_sum", [](const ModelHandle& h, double v) { return h.dp_group().all_reduce_scalar(v); },
          nb::arg("value"), "Sum of `value` over the data-parallel group (collective).");
  nb::class_<ScopedMode>(m, "ScopedMode").def("restore", &ScopedMode::restore);
}

}  // namespace

void bind_runtime(nb::module_& m) {
  m.def("load_plugin", &load_plugin, nb::arg("path"),
        "Loads a model plugin (a shared library built against libbumblebee.so) and registers its models.");
  bind_packed_batch(m);
  bind_model_handle(m);
  nb::class_<Runtime>(m, "Runtime")
      .def(
          "__init__",
          [](Runtime* rt, const std::vector<std::string>& words) { new (rt) Runtime(parse_runtime_config(words)); },
          nb::arg("words"), "A runtime from key=value words (every key of the configuration schema).")
      .def_prop_ro("world_rank", [](Runtime& rt) { return rt.parallel_state().world_rank(); })
      .def_prop_ro("world_size", [](Runtime& rt) { return rt.parallel_state().world_size(); })
      .def_prop_ro("tp_size", [](Runtime& rt) { return rt.parallel_state().tp_size(); })
      .def_prop_ro("dp_size", [](Runtime& rt) { return rt.parallel_state().dp_size(); })
      .def("build_model", [](Runtime& rt) { return rt.build_model(); })
      .def(
          "build_model_with",
          [](Runtime& rt, const std::vector<std::string>& words) {
            return rt.build_model(parse_runtime_config(words).backend_cfg);
          },
          nb::arg("words"), "A model from the backend.* and optimizer.* keys of `words` instead of the runtime's.")
      .def("train_mode", [](Runtime& rt, ModelHandle& h) { return ScopedMode{rt.train_mode(h)}; })
      .def("eval_mode", [](Runtime& rt, ModelHandle& h) { return ScopedMode{rt.eval_mode(h)}; })
      .def("zero_grad", &Runtime::zero_grad)
      .def(
          "to",
          [](Runtime& rt, ModelHandle& h, const std::string& device, bool model, bool optimizer, bool grad) {
            // "cuda" is the runtime's own GPU (cuda:local_rank under mpirun).
            const Device target = device == "cuda" && rt.device().is_cuda() ? rt.device() : Device::parse(device);
            rt.to(h, target, OffloadParts{model, optimizer, grad});
          },
          nb::arg("h"), nb::arg("device"), nb::arg("model"), nb::arg("optimizer"), nb::arg("grad"))
      .def(
          "forward_backward",
          [](Runtime& rt, ModelHandle& h, const PackedBatch& batch, nb::object loss_fn, int num_microbatches,
             bool forward_only, bool calculate_entropy, const std::string& router_replay) {
            const LossFn fn = python_loss(loss_fn);
            if (router_replay.empty())
              return forward_result_to_python(
                  rt.forward_backward(h, batch, fn, num_microbatches, forward_only, calculate_entropy));
            PackedBatch replayed = batch;
            replayed.router_replay = router_replay;
            return forward_result_to_python(
                rt.forward_backward(h, replayed, fn, num_microbatches, forward_only, calculate_entropy));
          },
          nb::arg("h"), nb::arg("batch"), nb::arg("loss_fn").none(), nb::arg("num_microbatches"),
          nb::arg("forward_only"), nb::arg("calculate_entropy"), nb::arg("router_replay"))
      .def("optimizer_step",
           [](Runtime& rt, ModelHandle& h) {
             const OptimizerStepResult s = rt.optimizer_step(h);
             return std::make_tuple(s.update_successful, s.grad_norm, s.num_zeros_in_grad);
           })
      .def("lr_scheduler_step", &Runtime::lr_scheduler_step)
      .def("current_lr", &Runtime::current_lr)
      .def("save_checkpoint", &Runtime::save_checkpoint)
      .def("load_checkpoint", &Runtime::load_checkpoint)
      .def("save_hf_checkpoint",
           [](Runtime& rt, ModelHandle& h, const std::string& dir) { rt.save_hf_checkpoint(h, dir); })
      .def(
          "export_weights",
          [](Runtime& rt, ModelHandle& h, nb::callable sink, const std::string& dtype, uint64_t bucket_bytes,
             bool rank0_only, bool to_device) {
            ExportOptions opts;
            opts.dtype = dtype;
            opts.bucket_bytes = bucket_bytes;
            opts.rank0_only = rank0_only;
            opts.target = to_device ? ExportTarget::Device : ExportTarget::Host;
            // Python runs the export on a worker thread (bumblebee/runtime.py), whose current device is unset.
            // It runs without the GIL, so the caller's thread works on one bucket while this one gathers the next.
            nb::gil_scoped_release released;
            device_make_current(rt.device());
            rt.export_weights(
                h,
                [&](const WeightBucket& bucket) {
                  nb::gil_scoped_acquire acquired;
                  nb::list out;
                  for (const auto& [name, t] : bucket)
                    out.append(nb::make_tuple(name, to_device ? tensor_to_dlpack(t) : tensor_to_numpy(t)));
                  sink(out);
                },
                opts);
          },
          nb::arg("h"), nb::arg("sink"), nb::arg("dtype"), nb::arg("bucket_bytes"), nb::arg("rank0_only"),
          nb::arg("to_device"),
          "Calls sink([(hf_name, array), ...]) once per bucket (Runtime::export_weights with ExportOptions): numpy "
          "arrays over pinned host memory, or with to_device DLPack objects over the model's GPU.")
      .def("logits", [](Runtime& rt, ModelHandle& h, const PackedBatch& batch) {
        const Tensor l = rt.logits(h, batch);
        return to_numpy(l.to_doubles(), {size_t(l.size(0)), size_t(l.size(1))});
      });
}

}  // namespace bb::python
