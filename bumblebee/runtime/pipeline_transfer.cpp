// Pipeline-group transfers of the runtime.
#include "bumblebee/runtime/pipeline_transfer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "bumblebee/ops/ops.h"

namespace bb {

namespace {

// Broadcast of a host tensor through `dev`, in place.
void broadcast_host(dist::Communicator& pp, int root, Device dev, Tensor& host) {
  if (host.numel() == 0) return;
  Tensor t = host.to(dev);
  pp.broadcast(t, root);
  if (!t.shares_storage(host)) host.copy_from(t);
}

std::string broadcast_string(dist::Communicator& pp, int root, Device dev, const std::string& s) {
  const bool is_root = pp.rank() == root;
  const int64_t n = int64_t(pp.all_reduce_scalar(is_root ? double(s.size()) : 0.0));
  Tensor t = Tensor::empty({n}, DType::U8);
  if (is_root) std::copy(s.begin(), s.end(), t.data<uint8_t>());
  broadcast_host(pp, root, dev, t);
  const uint8_t* p = n > 0 ? t.data<uint8_t>() : nullptr;
  return std::string(p, p + n);
}

}  // namespace

void sum_tied_grad_over_pipeline_ends(dist::Communicator& pp, Parameter& tied) {
  const int peer = pp.rank() == 0 ? pp.size() - 1 : 0;
  BB_CHECK(pp.rank() == 0 || pp.rank() == pp.size() - 1, "tied parameter '", tied.name, "' on pp rank ", pp.rank(),
           ", which is neither the first nor the last stage of ", pp.size());
  grad_to_accumulate(tied);
  Tensor theirs = Tensor::empty(tied.grad.shape(), tied.grad.dtype(), tied.grad.device());
  pp.batch_isend_irecv({dist::P2POp::send(tied.grad, peer), dist::P2POp::recv(theirs, peer)})->wait();
  ops::add_(tied.grad, theirs);
}

void broadcast_from_last_stage(dist::Communicator& pp, Device dev, ForwardResult& result, double& local_loss_sum) {
  const int root = pp.size() - 1;
  nlohmann::json j;
  if (pp.rank() == root) {
    j["metrics"] = result.metrics;
    j["local_loss_sum"] = local_loss_sum;
    for (const ModelOutputs& o : result.model_output)
      j["outputs"].push_back(
          {{"loss", o.loss}, {"log_probs", o.log_probs}, {"token_loss", o.token_loss}, {"entropy", o.entropy}});
  }
  j = nlohmann::json::parse(broadcast_string(pp, root, dev, pp.rank() == root ? j.dump() : std::string()));
  if (pp.rank() == root) return;
  result.metrics = j.at("metrics").get<std::map<std::string, std::vector<double>>>();
  local_loss_sum = j.at("local_loss_sum").get<double>();
  for (size_t i = 0; i < result.model_output.size(); ++i) {
    const nlohmann::json& o = j.at("outputs").at(i);
    ModelOutputs& out = result.model_output[i];
    out.loss = o.at("loss").get<double>();
    out.log_probs = o.at("log_probs").get<std::vector<double>>();
    out.token_loss = o.at("token_loss").get<std::vector<double>>();
    out.entropy = o.at("entropy").get<std::vector<double>>();
  }
}

void sum_metrics_over_stages(dist::Communicator& pp, Device dev, std::map<std::string, std::vector<double>>& metrics,
                             size_t num_microbatches) {
  const nlohmann::json mine = metrics;
  std::map<std::string, std::vector<double>> sum;
  for (int root = 0; root < pp.size(); ++root) {
    const std::string s = broadcast_string(pp, root, dev, pp.rank() == root ? mine.dump() : std::string());
    for (const auto& [k, v] : nlohmann::json::parse(s).get<std::map<std::string, std::vector<double>>>()) {
      std::vector<double>& acc = sum[k];
      acc.resize(std::max({acc.size(), v.size(), num_microbatches}), 0.0);
      for (size_t i = 0; i < v.size(); ++i) acc[i] += v[i];
    }
  }
  metrics = std::move(sum);
}

std::vector<std::pair<std::string, Tensor>> broadcast_named_tensors(
    dist::Communicator& pp, int root, Device dev, const std::vector<std::pair<std::string, Tensor>>& mine) {
  const bool is_root = pp.rank() == root;
  nlohmann::json index = nlohmann::json::array();
  if (is_root)
    for (const auto& [name, t] : mine) index.push_back({name, t.shape(), int(t.dtype())});
  index = nlohmann::json::parse(broadcast_string(pp, root, dev, is_root ? index.dump() : std::string()));
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < index.size(); ++i) {
    Tensor t = is_root ? mine[i].second.to(Device::cpu()).clone()
                       : Tensor::empty(index[i][1].get<Shape>(), DType(index[i][2].get<int>()));
    broadcast_host(pp, root, dev, t);
    out.emplace_back(index[i][0].get<std::string>(), t);
  }
  return out;
}

}  // namespace bb
