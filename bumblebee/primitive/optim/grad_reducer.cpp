// GradReducer: bucket bookkeeping and the launches.
#include "bumblebee/primitive/optim/grad_reducer.h"

namespace bb {

GradReducer::GradReducer(ParamGroup& group, dist::Communicator& comm) : group_(&group), dp_(&comm) {
  BB_CHECK(group.flat_grads().defined(), "gradient reducer for parameter group '", group.name(),
           "', which has no gradient buffer");
  const std::vector<GradBucket>& buckets = group.grad_buckets();
  const int64_t ranks = comm.size();
  if (ranks == 1) {
    shard_numel_ = group.flat_grads().numel();
    slices_.push_back({0, 0, shard_numel_});
    shard_ = group.flat_grads();
  } else {
    for (auto b = buckets.rbegin(); b != buckets.rend(); ++b) {
      BB_CHECK(b->numel() % ranks == 0, "gradient bucket [", b->begin, ", ", b->end, ") is not padded to dp ", ranks);
      const int64_t n = b->numel() / ranks;
      slices_.push_back({b->begin + comm.rank() * n, shard_numel_, n});
      shard_numel_ += n;
    }
    shard_ = Tensor::zeros({shard_numel_}, group.flat_grads().dtype(), group.flat_grads().device());
  }
  bucket_of_param_.assign(group.params().size(), 0);
  for (size_t k = 0; k < buckets.size(); ++k)
    for (size_t i = buckets[k].first_param; i < buckets[k].end_param; ++i) bucket_of_param_[i] = k;
  in_flight_.resize(buckets.size());
  invalidate();
}

void GradReducer::invalidate() {
  for (auto& pending : in_flight_) {
    if (pending) pending->wait();
    pending.reset();
  }
  launched_.assign(in_flight_.size(), false);
  started_.clear();
  polled_ = 0;
  reported_.assign(group_->params().size(), false);
  unreported_.clear();
  for (const GradBucket& b : group_->grad_buckets()) unreported_.push_back(b.end_param - b.first_param);
}

void GradReducer::grad_ready(const Parameter& p) {
  BB_CHECK(p.group_index < reported_.size() && !reported_[p.group_index], "parameter '", p.name,
           "' reported ready twice in one backward");
  BB_CHECK(p.group == group_, "parameter '", p.name, "' reported to the reducer of group '", group_->name(), "'");
  reported_[p.group_index] = true;
  if (dp_->size() == 1) return;
  const size_t k = bucket_of_param_[p.group_index];
  if (--unreported_[k] == 0) launch(k);
  // MPI moves data only inside MPI calls: give the buckets in flight a turn.
  // Any MPI_Test progresses them all, and they arrive about in start order,
  // so testing from the oldest one not yet arrived takes few calls.
  while (polled_ < started_.size() && in_flight_[started_[polled_]]->test()) ++polled_;
}

void GradReducer::check_all_reported() const {
  for (size_t i = 0; i < reported_.size(); ++i)
    BB_CHECK(reported_[i], "the model's backward never reported parameter '", group_->params()[i]->name,
             "' ready; its gradient bucket would not be reduced over dp");
}

void GradReducer::launch(size_t k) {
  const GradBucket& b = group_->grad_buckets()[k];
  // Buckets are stored in backward order, slices in buffer order.
  Tensor out = shard_.narrow(slices_[slices_.size() - 1 - k].shard_begin, b.numel() / dp_->size());
  in_flight_[k] = dp_->reduce_scatter_async(group_->flat_grads().narrow(b.begin, b.numel()), out);
  launched_[k] = true;
  started_.push_back(k);
}

Tensor& GradReducer::reduced_grads() {
  if (dp_->size() == 1) return shard_;
  for (size_t k = 0; k < launched_.size(); ++k)
    if (!launched_[k]) launch(k);
  for (auto& pending : in_flight_) {
    if (pending) pending->wait();
    pending.reset();
  }
  started_.clear();
  polled_ = 0;
  return shard_;
}

}  // namespace bb
