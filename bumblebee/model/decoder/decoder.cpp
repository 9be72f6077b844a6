// Decoder construction, initialisation, forward and backward.
#include "bumblebee/model/decoder/decoder.h"

#include <functional>

#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/block_sequence.h"
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"
#include "bumblebee/primitive/modules/parameter_init.h"

namespace bb {

struct Decoder::State : ForwardState {
  SequenceLayout seq;                     // the microbatch's, with router_aux set
  std::unique_ptr<RouterAuxLoss> router_aux;
  VocabParallelEmbedding::Saved embed;
  std::vector<std::unique_ptr<BlockState>> units;
  RMSNorm::Saved norm;
  LMHead::Saved head;
  MultiTokenPrediction::Saved mtp;
};

Decoder::Decoder(DecoderSpec spec, const BuildContext& ctx) : spec_(std::move(spec)), ctx_(ctx), range_(ctx.layers) {
  BB_CHECK(ctx_.parallel, "BuildContext has no parallel context");
  if (range_.end_layer < 0) range_.end_layer = spec_.num_layers;
  BB_CHECK(range_.first_layer >= 0 && range_.first_layer <= range_.end_layer && range_.end_layer <= spec_.num_layers,
           "layer range [", range_.first_layer, ", ", range_.end_layer, ") does not fit the model's ",
           spec_.num_layers, " layers");
  store_.set_lora(ctx_.lora);
  ParallelContext& pc = *ctx_.parallel;
  const int tp = pc.tp().size(), tp_rank = pc.tp().rank();
  const std::string embed_name = "model.embed_tokens.weight";
  if (range_.pre_process)
    embed_ = std::make_unique<VocabParallelEmbedding>(store_, embed_name, spec_.vocab_size, spec_.hidden_size, pc);
  std::vector<std::unique_ptr<Block>> layers;
  for (int64_t i = range_.first_layer; i < range_.end_layer; ++i) {
    layer_first_param_.push_back(store_.params().size());
    layers.push_back(spec_.build_layer(store_, "model.layers." + std::to_string(i) + ".", i));
  }
  layer_first_param_.push_back(store_.params().size());
  // Full recompute's runs first, then the layers after them one by one.
  const int64_t count = int64_t(layers.size());
  int64_t next = 0;
  for (const auto& [first, end] : ctx_.recompute.full_runs(count)) {
    std::vector<std::unique_ptr<Block>> run;
    for (int64_t i = first; i < end; ++i) run.push_back(std::move(layers[size_t(i)]));
    std::unique_ptr<Block> unit =
        run.size() == 1 ? std::move(run.front()) : std::make_unique<BlockSequence>(std::move(run));
    unit_first_layer_.push_back(size_t(first));
    units_.push_back(std::make_unique<Recompute>(std::move(unit)));
    next = end;
  }
  for (int64_t i = next; i < count; ++i) {
    unit_first_layer_.push_back(size_t(i));
    units_.push_back(std::move(layers[size_t(i)]));
  }
  unit_first_layer_.push_back(size_t(count));
  if (range_.post_process) {
    norm_ = std::make_unique<RMSNorm>(store_, "model.norm.weight", spec_.hidden_size, spec_.norm_eps);
    if (!spec_.tie_word_embeddings)
      head_weight_ = &store_.add("lm_head.weight", {spec_.vocab_size, spec_.hidden_size},
                                 {ShardKind::Vocab, tp_rank, tp});
    else if (embed_)
      head_weight_ = &embed_->weight();
    else   // the last stage's copy of the first stage's tied embedding
      head_weight_ = &store_.add(embed_name, {spec_.vocab_size, spec_.hidden_size}, {ShardKind::Vocab, tp_rank, tp});
    head_ = std::make_unique<LMHead>(*head_weight_, pc, ctx_.temperature, ctx_.lm_head_chunk_tokens);
    if (spec_.mtp_depths > 0)
      mtp_ = std::make_unique<MultiTokenPrediction>(store_, spec_.num_layers, spec_.mtp_depths, spec_.vocab_size,
                                                    spec_.hidden_size, spec_.norm_eps, spec_.mtp_loss_scale, pc,
                                                    spec_.build_layer, ctx_.residual_dtype);
  }
  store_.allocate(ctx_.param_groups, ctx_.dtype, ctx_.grad_dtype, ctx_.device, ctx_.grad_bucket_size);
  if (spec_.lazy_grad_zero) store_.defer_zero_grads();
}

void Decoder::init_weights(uint64_t seed) {
  // Each parameter draws from a generator keyed by its name, at the full
  // tensor's indices, so every layout initialises the same model (and a tied
  // embedding's copy on the last stage equals the first stage's).
  std::vector<NormalInit> normal;
  for (Parameter& p : store_.params()) {
    if (p.init == InitKind::Ones || p.init == InitKind::Zeros) {
      p.value.fill_(p.init == InitKind::Ones ? 1.0 : 0.0);
      continue;
    }
    if (p.init == InitKind::KaimingUniform) {
      init_kaiming_uniform_shard(p, seed ^ std::hash<std::string>{}(p.name));
      continue;
    }
    normal.push_back({&p, seed ^ std::hash<std::string>{}(p.name)});
  }
  init_normal_shards(normal, spec_.initializer_range);
}

std::vector<Parameter*> Decoder::tied_params() {
  if (!spec_.tie_word_embeddings || (range_.pre_process && range_.post_process)) return {};
  if (range_.pre_process) return {&embed_->weight()};
  if (range_.post_process) return {head_weight_};
  return {};
}

Tensor Decoder::forward(const DeviceMicroBatch& mb, const Tensor& hidden_in, const Tensor& dloss,
                        std::unique_ptr<ForwardState>& state) {
  auto st = std::make_unique<State>();
  st->units.resize(units_.size());
  st->seq = mb.seq;
  if (spec_.moe) {
    st->router_aux = std::make_unique<RouterAuxLoss>(spec_.router_losses, mb.aux_loss_weight);
    st->seq.router_aux = st->router_aux.get();
  }
  Tensor x = hidden_in;
  if (embed_) x = embed_->forward(mb.input_ids, ctx_.residual_dtype, st->embed);
  BB_CHECK(x.defined(), "a chunk without the embedding needs the previous stage's hidden states");
  for (size_t u = 0; u < units_.size(); ++u) x = units_[u]->forward(x, st->seq, st->units[u]);
  if (st->router_aux) st->router_aux->finish();
  if (mtp_)
    mtp_->forward(x, mb.input_ids, mb.labels, mb.loss_mask, mb.seq, mb.aux_loss_weight, dloss.defined(), st->mtp);
  if (head_) x = head_->forward(norm_->forward(x, st->norm), mb.labels, dloss, st->head, mb.calculate_entropy);
  state = std::move(st);
  return x;
}

Tensor Decoder::entropy(const ForwardState& state) const { return static_cast<const State&>(state).head.entropy; }

void Decoder::set_entropy_grad(ForwardState& state, const Tensor& dentropy) {
  BB_CHECK(head_, "set_entropy_grad on a pipeline stage without the lm_head");
  static_cast<State&>(state).head.dentropy = dentropy;
}

Tensor Decoder::backward(const DeviceMicroBatch& mb, const Tensor& grad_out, ForwardState& state,
                         const GradReadyFn& on_grad_ready) {
  State& st = static_cast<State&>(state);
  Tensor dx = grad_out;
  if (head_) {
    dx = norm_->backward(head_->backward(grad_out, st.head), st.norm);
    st.head = LMHead::Saved{};
    if (mtp_) ops::add_(dx, mtp_->backward(st.seq, st.mtp));
    // The final norm, an untied lm_head and the MTP layers come after the
    // layers; a tied head's weight is the embedding's, which is done only
    // after the embedding backward.
    grads_ready(layer_first_param_.back(), store_.params().size(), on_grad_ready);
  }
  for (size_t u = units_.size(); u-- > 0;) {
    dx = units_[u]->backward(dx, st.seq, st.units[u]);
    grads_ready(layer_first_param_[unit_first_layer_[u]], layer_first_param_[unit_first_layer_[u + 1]],
                on_grad_ready);
  }
  if (embed_) {
    embed_->backward(dx, st.embed);
    grads_ready(0, layer_first_param_.front(), on_grad_ready);
    dx = Tensor();
  }
  // After every backward no gradient is left pending, so it reads as the sum
  // it stands for (a parameter this microbatch did not reach: zeros).
  store_.settle_grads();
  return dx;
}

AuxLoss Decoder::aux_loss(const ForwardState& state) const {
  const State& st = static_cast<const State&>(state);
  AuxLoss out;
  if (mtp_) {
    double mean = 0;
    for (double l : st.mtp.losses) mean += l / double(st.mtp.losses.size());
    out.metrics["mtp_loss"] = mean;
    out.loss = st.mtp.objective;
  }
  if (!st.router_aux) return out;
  const RouterAuxLoss& r = *st.router_aux;
  out.present = r.config().aux;
  out.value = r.value();
  out.loss += r.loss();
  if (r.config().z_coeff != 0.0) out.metrics["z_loss"] = r.z_value();
  double dropped = 0;
  for (const RouterAuxLoss::Load& l : r.loads()) {
    const std::string layer = std::to_string(l.layer);
    out.metrics["expert_load_min." + layer] = double(l.min_rows);
    out.metrics["expert_load_max." + layer] = double(l.max_rows);
    dropped += double(l.dropped_rows);
  }
  if (!r.loads().empty()) out.metrics["dropped_tokens"] = dropped;
  return out;
}

void Decoder::grads_ready(size_t first, size_t end, const GradReadyFn& on_grad_ready) {
  if (!on_grad_ready) return;
  TensorParallel& tp = ctx_.parallel->tp();
  for (size_t i = first; i < end; ++i) {
    Parameter& p = store_.params()[i];
    if (!p.requires_grad()) continue;
    grad_to_accumulate(p);   // a gradient no microbatch wrote is zero
    // Expert parameters are not replicated over tp: each rank's are whole
    // gradients of the rows its etp group computed (SparseMoE), summed over edp only.
    if (p.replicated_over_tp() && p.cls != ParamClass::Expert) tp.reduce_replicated_grad(p.grad);
    on_grad_ready(p);
  }
}

Tensor Decoder::logits(const DeviceMicroBatch& mb, const Tensor& hidden_in) {
  State st;
  st.units.resize(units_.size());
  Tensor x = range_.pre_process ? embed_->forward(mb.input_ids, ctx_.residual_dtype, st.embed) : hidden_in;
  for (size_t u = 0; u < units_.size(); ++u) {
    x = units_[u]->forward(x, mb.seq, st.units[u]);
    st.units[u].reset();
  }
  return range_.post_process ? head_->full_logits(norm_->forward(x, st.norm)) : x;
}

}  // namespace bb
