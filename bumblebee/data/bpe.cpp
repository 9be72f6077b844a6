// Byte-level BPE encoding with a heap of ranked pairs over a linked list of symbols.
#include "bumblebee/data/bpe.h"

#include <mutex>
#include <queue>

#include "bumblebee/core/error.h"
#include "bumblebee/data/byte_level.h"

namespace bb {

ByteLevelBpe::ByteLevelBpe(std::unordered_map<std::string, int32_t> vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                           const std::string& source)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  const auto& chars = byte_level::byte_chars();
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(chars[size_t(b)]);
    BB_CHECK(it != vocab_.end(), source, ": byte-level BPE vocab lacks the symbol '", chars[size_t(b)],
             "' of byte ", b, " (every byte needs one)");
    byte_ids_[b] = it->second;
  }
  merge_of_pair_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
    BB_CHECK(ia != vocab_.end() && ib != vocab_.end(), source, ": merge ", rank, " ('", a, " ", b,
             "') names a token missing from the vocab");
    BB_CHECK(im != vocab_.end(), source, ": merge ", rank, " ('", a, " ", b, "') makes '", a + b,
             "', which is missing from the vocab");
    // A pair listed twice keeps its first (best) rank.
    merge_of_pair_.emplace(pair_key(ia->second, ib->second), Merge{int32_t(rank), im->second});
  }
}

void ByteLevelBpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  if (ignore_merges_) {
    auto it = vocab_.find(byte_level::encode(word));
    if (it != vocab_.end()) ids.push_back(it->second);
  }
  if (ids.empty()) merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    // Dropping everything when full keeps memory bounded; the common words come back at once.
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

void ByteLevelBpe::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;   // -1 at the ends
    bool alive;
  };
  struct Candidate {
    int32_t rank, left;   // left symbol index
    int32_t left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  const int32_t n = int32_t(word.size());
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    sym[size_t(i)] = {byte_ids_[static_cast<unsigned char>(word[size_t(i)])], i - 1, i + 1 < n ? i + 1 : -1, true};

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = sym[size_t(left)].next;
    if (right < 0) return;
    auto it = merge_of_pair_.find(pair_key(sym[size_t(left)].id, sym[size_t(right)].id));
    if (it != merge_of_pair_.end()) heap.push({it->second.rank, left, sym[size_t(left)].id, sym[size_t(right)].id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[size_t(c.left)];
    // Skip entries made stale by an earlier merge of either symbol.
    if (!left.alive || left.next < 0 || left.id != c.left_id || sym[size_t(left.next)].id != c.right_id) continue;
    Symbol& right = sym[size_t(left.next)];
    left.id = merge_of_pair_.at(pair_key(c.left_id, c.right_id)).merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = c.left;
    push_pair(left.prev);
    push_pair(c.left);
  }
  for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

}  // namespace bb
