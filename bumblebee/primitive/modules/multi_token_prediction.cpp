// Multi-token prediction: the depth-k targets, one depth's forward and backward, and the chain of depths.
#include "bumblebee/primitive/modules/multi_token_prediction.h"

#include <numeric>

#include "bumblebee/core/error.h"
#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/linear.h"

namespace bb {

namespace {
std::vector<int64_t> iota(int64_t begin, int64_t count) {
  std::vector<int64_t> v(static_cast<size_t>(count));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

std::vector<int64_t> host_ints(const Tensor& t) {
  const std::vector<double> d = t.to_doubles();
  return std::vector<int64_t>(d.begin(), d.end());
}
}  // namespace

MtpTargets mtp_targets(const std::vector<int64_t>& input_ids, const std::vector<int64_t>& labels,
                       const std::vector<double>& loss_mask, const std::vector<int64_t>& cu_seqlens, int64_t depth) {
  const size_t T = input_ids.size();
  BB_CHECK(labels.size() == T && loss_mask.size() == T, "mtp_targets: ", T, " ids, ", labels.size(), " labels, ",
           loss_mask.size(), " mask values");
  BB_CHECK(!cu_seqlens.empty() && cu_seqlens.back() == int64_t(T), "mtp_targets: cu_seqlens ends at ",
           cu_seqlens.empty() ? 0 : cu_seqlens.back(), ", the microbatch has ", T, " tokens");
  MtpTargets out{std::vector<int64_t>(T, 0), std::vector<int64_t>(T, 0), std::vector<double>(T, 0.0)};
  for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s)
    for (int64_t i = cu_seqlens[s]; i + depth < cu_seqlens[s + 1]; ++i) {
      // Position i + depth holds t_{i+k} and, as its next-token label, t_{i+k+1} with its mask.
      const size_t j = size_t(i + depth);
      out.ids[size_t(i)] = input_ids[j];
      out.labels[size_t(i)] = labels[j];
      out.mask[size_t(i)] = loss_mask[j];
    }
  return out;
}

MtpLayer::MtpLayer(ParamStore& store, int64_t layer, int64_t vocab, int64_t hidden, double eps, ParallelContext& pc,
                   const DecoderLayerFactory& decoder_layer, DType residual_dtype)
    : hidden_(hidden),
      residual_dtype_(residual_dtype),
      embed_(store, "model.layers." + std::to_string(layer) + ".embed_tokens.weight", vocab, hidden, pc),
      enorm_(store, "model.layers." + std::to_string(layer) + ".enorm.weight", hidden, eps),
      hnorm_(store, "model.layers." + std::to_string(layer) + ".hnorm.weight", hidden, eps),
      eh_proj_(&store.add("model.layers." + std::to_string(layer) + ".eh_proj.weight", {hidden, 2 * hidden},
                           {ShardKind::Replicated, pc.tp().rank(), pc.tp().size()})),
      embed_columns_(2 * hidden, iota(0, hidden)),
      hidden_columns_(2 * hidden, iota(hidden, hidden)),
      layer_(decoder_layer(store, "model.layers." + std::to_string(layer) + ".", layer)),
      head_norm_(store, "model.layers." + std::to_string(layer) + ".shared_head.norm.weight", hidden, eps),
      head_weight_(&store.add("model.layers." + std::to_string(layer) + ".shared_head.head.weight", {vocab, hidden},
                              {ShardKind::Vocab, pc.tp().rank(), pc.tp().size()})),
      head_(*head_weight_, pc, 1.0) {}

Tensor MtpLayer::forward(const Tensor& h_prev, const Tensor& ids, const Tensor& labels, const Tensor& dloss,
                         const SequenceLayout& seq, Tensor& token_loss, Saved& s) {
  const Tensor e = enorm_.forward(embed_.forward(ids, residual_dtype_, s.embed), s.enorm);
  const Tensor h = hnorm_.forward(h_prev, s.hnorm);
  // The concatenation as two column scatters (ops.h has no strided copy; each is exact).
  embed_columns_.backward(e, s.cat, false);
  hidden_columns_.backward(h, s.cat, true);
  const Tensor x = linear_forward(s.cat, eh_proj_->value).to(residual_dtype_);
  const Tensor out = layer_->forward(x, seq, s.layer);
  token_loss = head_.forward(head_norm_.forward(out, s.head_norm), labels, dloss, s.head);
  return out;
}

Tensor MtpLayer::backward(const Tensor& dh_next, const Tensor& dloss, const SequenceLayout& seq, Saved& s) {
  Tensor dout = head_norm_.backward(head_.backward(dloss, s.head), s.head_norm);
  s.head = LMHead::Saved{};
  if (dh_next.defined()) ops::add_(dout, dh_next);
  const Tensor dx = layer_->backward(dout, seq, s.layer).to(eh_proj_->value.dtype());
  Tensor dcat;
  linear_backward(dx, s.cat, eh_proj_->value, eh_proj_->grad, dcat, false, grad_write_beta(*eh_proj_));
  s.cat = Tensor();
  embed_.backward(enorm_.backward(embed_columns_.forward(dcat), s.enorm), s.embed);
  return hnorm_.backward(hidden_columns_.forward(dcat), s.hnorm);
}

MultiTokenPrediction::MultiTokenPrediction(ParamStore& store, int64_t first_layer, int64_t depths, int64_t vocab,
                                           int64_t hidden, double eps, double loss_scale, ParallelContext& pc,
                                           const DecoderLayerFactory& decoder_layer, DType residual_dtype)
    : loss_scale_(loss_scale) {
  BB_CHECK(depths > 0, "multi-token prediction needs at least one depth, got ", depths);
  BB_CHECK(loss_scale >= 0, "mtp_loss_scaling_factor must be >= 0, got ", loss_scale);
  BB_CHECK(pc.cp().size() == 1, "multi-token prediction needs each sequence's tokens in order on one rank; it does ",
           "not run under context parallelism (cp = ", pc.cp().size(), ")");
  for (int64_t k = 1; k <= depths; ++k)
    layers_.push_back(std::make_unique<MtpLayer>(store, first_layer + k - 1, vocab, hidden, eps, pc, decoder_layer,
                                                 residual_dtype));
}

void MultiTokenPrediction::forward(const Tensor& h0, const Tensor& input_ids, const Tensor& labels,
                                   const Tensor& loss_mask, const SequenceLayout& seq, double weight, bool fused,
                                   Saved& s) {
  BB_CHECK(loss_mask.defined(), "multi-token prediction needs the microbatch's loss mask");
  const std::vector<int64_t> ids = host_ints(input_ids), lab = host_ints(labels), cu = host_ints(seq.cu_seqlens);
  const std::vector<double> mask = loss_mask.to_doubles();
  const Device dev = h0.device();
  const DType loss_dt = loss_mask.dtype();
  const int64_t T = int64_t(ids.size());
  // The MTP layers' routers are neither replayed nor part of the router losses, which are the main model's.
  SequenceLayout mtp_seq = seq;
  mtp_seq.router_aux = nullptr;
  mtp_seq.router_replay = nullptr;
  s = Saved{};
  s.fused = fused;
  s.depths.resize(layers_.size());
  Tensor h = h0;
  for (size_t d = 0; d < layers_.size(); ++d) {
    const MtpTargets t = mtp_targets(ids, lab, mask, cu, int64_t(d) + 1);
    const double count = std::accumulate(t.mask.begin(), t.mask.end(), 0.0);
    const double coeff = count > 0 ? loss_scale_ / double(layers_.size()) * weight / count : 0.0;
    std::vector<double> w(t.mask);
    for (double& x : w) x *= coeff;
    s.dloss.push_back(Tensor::from_doubles(w, {T}, loss_dt).to(dev));
    Tensor token_loss;
    h = layers_[d]->forward(h, Tensor::from_vector(t.ids, {T}).to(dev), Tensor::from_vector(t.labels, {T}).to(dev),
                            fused ? s.dloss.back() : Tensor(), mtp_seq, token_loss, s.depths[d]);
    const std::vector<double> tl = token_loss.to_doubles();
    double sum = 0;
    for (size_t i = 0; i < tl.size(); ++i) sum += t.mask[i] * tl[i];
    s.losses.push_back(count > 0 ? sum / count : 0.0);
    s.objective += coeff * sum;
  }
}

Tensor MultiTokenPrediction::backward(const SequenceLayout& seq, Saved& s) {
  SequenceLayout mtp_seq = seq;
  mtp_seq.router_aux = nullptr;
  mtp_seq.router_replay = nullptr;
  Tensor dh;
  for (size_t d = layers_.size(); d-- > 0;) dh = layers_[d]->backward(dh, s.dloss[d], mtp_seq, s.depths[d]);
  s = Saved{};
  return dh;
}

}  // namespace bb
