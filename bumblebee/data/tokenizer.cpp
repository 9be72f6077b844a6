// Loading tokenizer.json into its pipeline parts, and the encode/decode pipeline.
#include "bumblebee/data/tokenizer.h"

#include <nlohmann/json.hpp>

#include "bumblebee/core/error.h"
#include "bumblebee/core/input_file.h"
#include "bumblebee/data/added_vocabulary.h"
#include "bumblebee/data/bpe.h"
#include "bumblebee/data/byte_level.h"
#include "bumblebee/data/regex_split.h"
#include "bumblebee/data/unicode_nfc.h"
#include "bumblebee/data/utf8.h"

namespace bb {

using json = nlohmann::json;

namespace {

// ByteLevel's own split (use_regex=true, the GPT-2 layout).
const char* kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct PreTokenizeStep {
  std::unique_ptr<RegexSplitter> splitter;   // null: no split at this step
  bool byte_level = false;
  bool add_prefix_space = false;
};

// Ids index a table of the vocabulary, so a hostile id must not size it: the largest
// vocabularies in use have a few hundred thousand tokens.
constexpr int64_t kMaxTokenId = (int64_t(1) << 24) - 1;

// A token id as written in `what`, checked to be an integer in [0, kMaxTokenId].
int32_t token_id(const json& v, const std::string& source, const std::string& what) {
  BB_CHECK(v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0) &&
               v.get<uint64_t>() <= uint64_t(kMaxTokenId),
           source, ": ", what, " has id ", v.dump(), ", expected an integer in [0, ", kMaxTokenId, "]");
  return int32_t(v.get<int64_t>());
}

bool null_or_missing(const json& j, const char* key) { return !j.contains(key) || j[key].is_null(); }

std::string type_of(const json& j, const std::string& source, const char* section) {
  BB_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), source, ": ", section,
           " has no \"type\" string");
  return j["type"].get<std::string>();
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  bool nfc = false;
  std::vector<PreTokenizeStep> pre_tokenizer;
  std::unique_ptr<ByteLevelBpe> bpe;
  AddedVocabulary added;
  std::vector<int32_t> template_prefix, template_suffix;   // post-processor, single sequence
  std::vector<const std::string*> token_of_id;             // null where no token has the id

  void parse_normalizer(const json& j);
  void parse_pre_tokenizer(const json& j);
  void parse_model(const json& j);
  void parse_post_processor(const json& j);
  void parse_decoder(const json& j) const;
};

void Tokenizer::Impl::parse_normalizer(const json& j) {
  if (j.is_null()) return;
  const std::string type = type_of(j, source, "normalizer");
  if (type == "Sequence") {
    for (const auto& n : j.at("normalizers")) parse_normalizer(n);
    return;
  }
  BB_CHECK(type == "NFC", source, ": normalizer type '", type,
           "' is not supported (byte-level BPE tokenizers use NFC or none)");
  nfc = true;
}

void Tokenizer::Impl::parse_pre_tokenizer(const json& j) {
  BB_CHECK(!j.is_null(), source, ": pre_tokenizer is null; a byte-level BPE tokenizer needs a ByteLevel step");
  const std::string type = type_of(j, source, "pre_tokenizer");
  if (type == "Sequence") {
    for (const auto& p : j.at("pretokenizers")) parse_pre_tokenizer(p);
    return;
  }
  BB_CHECK(pre_tokenizer.empty() || !pre_tokenizer.back().byte_level, source, ": pre_tokenizer step '", type,
           "' follows ByteLevel; ByteLevel must come last");
  PreTokenizeStep step;
  if (type == "Split") {
    const std::string behavior = j.value("behavior", "");
    BB_CHECK(behavior == "Isolated", source, ": Split behavior '", behavior, "' is not supported (only Isolated)");
    BB_CHECK(!j.value("invert", false), source, ": Split with invert=true is not supported");
    const json& pattern = j.at("pattern");
    if (pattern.contains("Regex"))
      step.splitter = std::make_unique<RegexSplitter>(pattern["Regex"].get<std::string>(), false);
    else if (pattern.contains("String"))
      step.splitter = std::make_unique<RegexSplitter>(pattern["String"].get<std::string>(), true);
    else
      BB_FAIL(source, ": Split pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
  } else if (type == "ByteLevel") {
    step.byte_level = true;
    step.add_prefix_space = j.value("add_prefix_space", false);
    if (j.value("use_regex", true)) step.splitter = std::make_unique<RegexSplitter>(kGpt2SplitPattern, false);
  } else {
    BB_FAIL(source, ": pre_tokenizer type '", type, "' is not supported (Sequence, Split, ByteLevel are)");
  }
  pre_tokenizer.push_back(std::move(step));
}

void Tokenizer::Impl::parse_model(const json& j) {
  const std::string type = type_of(j, source, "model");
  BB_CHECK(type == "BPE", source, ": model type '", type, "' is not supported (only byte-level BPE)");
  BB_CHECK(null_or_missing(j, "dropout"), source, ": BPE dropout is a training-time option and is not supported");
  BB_CHECK(!j.value("byte_fallback", false), source, ": BPE byte_fallback (SentencePiece style) is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    BB_CHECK(null_or_missing(j, key) || j[key].get<std::string>().empty(), source, ": BPE ", key,
             " is not supported by byte-level BPE");
  std::unordered_map<std::string, int32_t> vocab;
  for (const auto& [token, id] : j.at("vocab").items())
    vocab.emplace(token, token_id(id, source, "vocab token '" + token + "'"));
  std::vector<std::pair<std::string, std::string>> merges;
  const json& merge_list = j.at("merges");
  merges.reserve(merge_list.size());
  for (size_t i = 0; i < merge_list.size(); ++i) {
    const json& m = merge_list[i];
    if (m.is_string()) {   // older spelling: "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      BB_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, source, ": merge ", i,
               " '", s, "' is not two tokens separated by one space");
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {               // newer spelling: ["a", "b"]
      BB_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), source, ": merge ", i,
               " is neither \"a b\" nor [\"a\", \"b\"]");
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  bpe = std::make_unique<ByteLevelBpe>(std::move(vocab), merges, j.value("ignore_merges", false), source);
}

void Tokenizer::Impl::parse_post_processor(const json& j) {
  if (j.is_null()) return;
  const std::string type = type_of(j, source, "post_processor");
  if (type == "Sequence") {
    for (const auto& p : j.at("processors")) parse_post_processor(p);
  } else if (type == "TemplateProcessing") {
    const json& specials = j.at("special_tokens");
    bool after_sequence = false;
    for (const json& item : j.at("single")) {
      if (item.contains("Sequence")) {
        after_sequence = true;
        continue;
      }
      BB_CHECK(item.contains("SpecialToken"), source, ": TemplateProcessing item ", item.dump(),
               " is neither Sequence nor SpecialToken");
      const std::string name = item["SpecialToken"].at("id").get<std::string>();
      BB_CHECK(specials.contains(name), source, ": TemplateProcessing names special token '", name,
               "' missing from its special_tokens");
      for (const auto& id : specials[name].at("ids"))
        (after_sequence ? template_suffix : template_prefix)
            .push_back(token_id(id, source, "post_processor special token '" + name + "'"));
    }
  } else {
    // ByteLevel only trims offsets, which ids do not carry.
    BB_CHECK(type == "ByteLevel", source, ": post_processor type '", type,
             "' is not supported (ByteLevel, TemplateProcessing, Sequence are)");
  }
}

void Tokenizer::Impl::parse_decoder(const json& j) const {
  BB_CHECK(!j.is_null() && type_of(j, source, "decoder") == "ByteLevel", source,
           ": decoder must be ByteLevel for a byte-level BPE tokenizer, found ", j.dump());
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_json(read_input_file(path, "tokenizer file"), path);
}

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& source) {
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    BB_FAIL(source, ": not valid JSON: ", e.what());
  }
  try {
    BB_CHECK(j.is_object() && j.contains("model"), source, ": not a tokenizer.json (no \"model\")");
    impl->parse_model(j["model"]);
    impl->parse_normalizer(j.value("normalizer", json()));
    impl->parse_pre_tokenizer(j.value("pre_tokenizer", json()));
    BB_CHECK(!impl->pre_tokenizer.empty() && impl->pre_tokenizer.back().byte_level, source,
             ": pre_tokenizer has no ByteLevel step, so this is not a byte-level BPE tokenizer");
    impl->parse_post_processor(j.value("post_processor", json()));
    impl->parse_decoder(j.value("decoder", json()));
    std::vector<AddedToken> added;
    for (const json& t : j.value("added_tokens", json::array())) {
      BB_CHECK(!t.value("single_word", false), source, ": added token '", t.value("content", ""),
               "' sets single_word, which is not supported");
      added.push_back({token_id(t.at("id"), source, "added token " + t.dump()), t.at("content").get<std::string>(), t.value("special", false),
                       t.value("lstrip", false), t.value("rstrip", false)});
    }
    impl->added = AddedVocabulary(std::move(added));
  } catch (const json::exception& e) {
    BB_FAIL(source, ": unexpected tokenizer.json layout: ", e.what());
  }

  int32_t max_id = -1;
  for (const auto& [token, id] : impl->bpe->vocab()) max_id = std::max(max_id, id);
  for (const auto& t : impl->added.tokens()) max_id = std::max(max_id, t.id);
  impl->token_of_id.assign(size_t(max_id + 1), nullptr);
  for (const auto& [token, id] : impl->bpe->vocab()) impl->token_of_id[size_t(id)] = &token;
  for (const auto& t : impl->added.tokens()) impl->token_of_id[size_t(t.id)] = &t.content;
  for (int32_t id : impl->template_prefix)
    BB_CHECK(id >= 0 && id <= max_id, source, ": post_processor id ", id, " is outside the vocabulary");
  for (int32_t id : impl->template_suffix)
    BB_CHECK(id >= 0 && id <= max_id, source, ": post_processor id ", id, " is outside the vocabulary");
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& t = *impl_;
  utf8::check_valid(text, "text to encode");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = t.template_prefix;
  std::vector<std::string> pieces, next;
  std::vector<std::string_view> parts;
  for (const auto& segment : t.added.split(text)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    pieces.assign(1, t.nfc ? unicode::nfc(segment.text) : std::string(segment.text));
    for (const PreTokenizeStep& step : t.pre_tokenizer) {
      if (step.add_prefix_space)
        for (auto& p : pieces)
          if (p.empty() || p[0] != ' ') p.insert(p.begin(), ' ');
      if (!step.splitter) continue;
      next.clear();
      for (const auto& p : pieces) {
        parts.clear();
        step.splitter->split(p, parts);
        next.insert(next.end(), parts.begin(), parts.end());
      }
      pieces.swap(next);
    }
    for (const auto& p : pieces) t.bpe->encode_word(p, ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), t.template_suffix.begin(), t.template_suffix.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    bytes += byte_level::decode_token(id_to_token(id));
  }
  return utf8::from_bytes_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* t = impl_->added.find_content(token)) return t->id;
  auto it = impl_->bpe->vocab().find(std::string(token));
  if (it != impl_->bpe->vocab().end()) return it->second;
  return std::nullopt;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  BB_CHECK(id >= 0 && size_t(id) < impl_->token_of_id.size() && impl_->token_of_id[size_t(id)], "token id ", id,
           " is outside the vocabulary of ", impl_->source, " (", vocab_size(), " ids)");
  return *impl_->token_of_id[size_t(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* t = impl_->added.find_id(id);
  return t && t->special;
}

int64_t Tokenizer::vocab_size() const { return int64_t(impl_->token_of_id.size()); }

const std::string& Tokenizer::source() const { return impl_->source; }

}  // namespace bb
