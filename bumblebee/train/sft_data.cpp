// SFT TrainData: JSONL -> conversations -> packed rows -> per-step batches.
#include "bumblebee/train/sft_data.h"

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bumblebee/core/error.h"
#include "bumblebee/core/input_file.h"
#include "bumblebee/core/rng.h"
#include "bumblebee/data/chat_template.h"
#include "bumblebee/data/gpt_dataset.h"

namespace bb::train {

namespace {

constexpr const char* kWhitespace = " \t\r\n";

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(kWhitespace);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(kWhitespace) - begin + 1);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Each line of the file as a JSON object; a bad line is a bb::Error with its number.
std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream f = open_input_file(path, "data.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  for (int64_t number = 1; std::getline(f, line); ++number) {
    if (trim(line).empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      BB_FAIL(path, " line ", number, ": malformed JSON: ", e.what());
    }
    BB_CHECK(out.back().is_object(), path, " line ", number, ": expected a JSON object");
  }
  return out;
}

std::string string_field(const nlohmann::json& doc, const std::string& key, const std::string& path, size_t index) {
  BB_CHECK(doc.contains(key) && doc[key].is_string(), path, " document ", index + 1, ": no string field \"", key,
           "\"");
  return doc[key].get<std::string>();
}

// A line's "messages": a non-empty array of {"role", "content"[, "reasoning_content"]} objects.
std::vector<ChatMessage> chat_messages(const nlohmann::json& doc, const std::string& path, size_t index) {
  BB_CHECK(doc.contains("messages") && doc["messages"].is_array() && !doc["messages"].empty(), path, " document ",
           index + 1, ": no non-empty \"messages\" array");
  std::vector<ChatMessage> out;
  for (const nlohmann::json& m : doc["messages"]) {
    auto field = [&](const char* key, bool required) {
      const bool present = m.is_object() && m.contains(key);
      BB_CHECK(present ? m[key].is_string() : !required, path, " document ", index + 1, " message ", out.size() + 1,
               ": no string field \"", key, "\"");
      return present ? m[key].get<std::string>() : std::string();
    };
    out.push_back({field("role", true), field("content", true), field("reasoning_content", false)});
  }
  return out;
}

// The conversations of one document.
std::vector<Conversation> document_conversations(const Tokenizer& tok, const nlohmann::json& doc,
                                                 const DataRecipe& data, ChatTemplate chat, size_t index) {
  std::vector<Conversation> out;
  if (data.sft_format == "messages") {
    const std::vector<ChatMessage> messages = chat_messages(doc, data.jsonl, index);
    try {
      out.push_back(tokenize_chat(tok, chat, messages));
    } catch (const Error& e) {
      BB_FAIL(data.jsonl, " document ", index + 1, ": ", e.what());
    }
  } else if (data.sft_format == "prompt_response") {
    out.push_back({chatml_turn(tok, string_field(doc, "prompt", data.jsonl, index),
                               string_field(doc, "response", data.jsonl, index))});
  } else {
    for (const auto& [prompt, response] : paragraph_pairs(string_field(doc, data.jsonl_key, data.jsonl, index)))
      out.push_back({chatml_turn(tok, prompt, response)});
  }
  return out;
}

PackedBatch concat_rows(const std::vector<PackedBatch>& rows, const std::vector<int64_t>& order, int64_t first,
                        int64_t count) {
  PackedBatch b;
  for (int64_t i = first; i < first + count; ++i) {
    const PackedBatch& r = rows[size_t(order[size_t(i)])];
    b.input_ids.insert(b.input_ids.end(), r.input_ids.begin(), r.input_ids.end());
    b.labels.insert(b.labels.end(), r.labels.begin(), r.labels.end());
    b.loss_mask.insert(b.loss_mask.end(), r.loss_mask.begin(), r.loss_mask.end());
    b.seq_lens.insert(b.seq_lens.end(), r.seq_lens.begin(), r.seq_lens.end());
  }
  return b;
}

// Row order of `count` draws: whole epochs, each a fresh shuffle of all rows.
std::vector<int64_t> epoch_order(int64_t rows, int64_t count, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> order, epoch(static_cast<size_t>(rows));
  while (int64_t(order.size()) < count) {
    std::iota(epoch.begin(), epoch.end(), int64_t(0));
    for (int64_t n = rows; n > 1; --n) std::swap(epoch[size_t(n - 1)], epoch[gen.next_u64() % uint64_t(n)]);
    order.insert(order.end(), epoch.begin(), epoch.end());
  }
  order.resize(size_t(count));
  return order;
}

class SftData : public TrainData {
 public:
  SftData(std::vector<PackedBatch> rows, std::vector<int64_t> order, int64_t per_rank, int64_t global, DataRank dp)
      : rows_(std::move(rows)), order_(std::move(order)), per_rank_(per_rank), global_(global), dp_(dp) {}

  PackedBatch train_batch(int64_t step) const override {
    return concat_rows(rows_, order_, step * global_ + dp_.rank * per_rank_, per_rank_);
  }

  void set_valid(const std::vector<PackedBatch>& rows, int64_t eval_batches) {
    // Fewer held-out rows than the evaluation takes: they are reused in order.
    std::vector<int64_t> order(size_t(eval_batches * global_));
    for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i % rows.size());
    for (int64_t b = 0; b < eval_batches; ++b)
      valid_batches_.push_back(concat_rows(rows, order, b * global_ + dp_.rank * per_rank_, per_rank_));
  }
  void set_description(std::string d) { description_ = std::move(d); }

 private:
  std::vector<PackedBatch> rows_;
  std::vector<int64_t> order_;
  int64_t per_rank_, global_;
  DataRank dp_;
};

}  // namespace

std::pair<std::string, std::string> split_first_sentence(const std::string& paragraph) {
  const std::string p = trim(paragraph);
  for (size_t i = kMinPromptChars - 1; i + 1 < p.size(); ++i) {
    if ((p[i] == '.' || p[i] == '?' || p[i] == '!') && is_space(p[i + 1])) {
      std::string response = trim(p.substr(i + 1));
      if (response.empty()) break;
      return {p.substr(0, i + 1), std::move(response)};
    }
  }
  return {};
}

std::vector<std::pair<std::string, std::string>> paragraph_pairs(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find("\n\n", begin);
    if (end == std::string::npos) end = text.size();
    auto pair = split_first_sentence(text.substr(begin, end - begin));
    if (!pair.first.empty()) out.push_back(std::move(pair));
    begin = end + 2;
  }
  return out;
}

ConversationTurn chatml_turn(const Tokenizer& tokenizer, const std::string& prompt, const std::string& response) {
  auto ids = [&](const std::string& text) {
    const std::vector<int32_t> v = tokenizer.encode(text, /*add_special_tokens=*/false);
    return std::vector<int64_t>(v.begin(), v.end());
  };
  return {ids("<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n"), ids(response + "<|im_end|>\n")};
}

namespace {

// data.chat_template, or the family of the tokenizer_config.json beside data.tokenizer.
ChatTemplate resolve_chat_template(const DataRecipe& data) {
  if (!data.chat_template.empty()) return chat_template_from_name(data.chat_template);
  const std::string config =
      (std::filesystem::path(data.tokenizer).parent_path() / "tokenizer_config.json").string();
  BB_CHECK(std::filesystem::exists(config), "data.sft_format=messages needs a chat template: ", config,
           " (beside data.tokenizer) does not exist; set data.chat_template=qwen3|llama3|llama3.1|chatml");
  return chat_template_from_tokenizer_config(config);
}

}  // namespace

std::unique_ptr<TrainData> make_sft_data(const Tokenizer& tokenizer, const DataRecipe& data,
                                         const TrainRecipe& train, int64_t vocab_size, DataRank dp) {
  const ChatTemplate chat = data.sft_format == "messages" ? resolve_chat_template(data) : ChatTemplate::ChatML;
  const std::vector<nlohmann::json> docs = read_jsonl(data.jsonl);
  BB_CHECK(!docs.empty(), "data.jsonl ", data.jsonl, " holds no documents");
  const auto parts = split_documents(int64_t(docs.size()), {data.train_fraction, data.valid_fraction});
  std::vector<PackedBatch> rows[2];
  int64_t conversations[2] = {0, 0}, truncated = 0;
  for (int split = 0; split < 2; ++split) {
    std::vector<Conversation> convs;
    for (int64_t d : parts[size_t(split)]) {
      for (Conversation& c : document_conversations(tokenizer, docs[size_t(d)], data, chat, size_t(d))) {
        for (const ConversationTurn& t : c)
          for (const auto* ids : {&t.prompt, &t.response})
            for (int64_t id : *ids)
              BB_CHECK(id >= 0 && id < vocab_size, "data.jsonl ", data.jsonl, " document ", d + 1, ": token ", id,
                       " is outside the model's vocabulary of ", vocab_size);
        convs.push_back(std::move(c));
      }
    }
    conversations[split] = int64_t(convs.size());
    SftPacking packed = pack_conversations(convs, data.seq_len);
    truncated += packed.truncated_conversations;
    rows[split] = std::move(packed.batches);
  }
  BB_CHECK(!rows[0].empty(), "data.jsonl ", data.jsonl, " gives no training conversations (data.sft_format=",
           data.sft_format, ")");
  const int64_t per_rank = train.micro_batch_size * train.num_microbatches;
  const int64_t global = per_rank * dp.size;
  auto out = std::make_unique<SftData>(rows[0], epoch_order(int64_t(rows[0].size()), train.steps * global, train.seed),
                                       per_rank, global, dp);
  if (train.eval_batches > 0) {
    BB_CHECK(!rows[1].empty(), "data.jsonl ", data.jsonl, " gives the valid split no conversations (",
             parts[1].size(), " documents); raise the valid fraction of data.split or set train.eval_batches=0");
    out->set_valid(rows[1], train.eval_batches);
  }
  std::ostringstream desc;
  desc << "sft data: " << docs.size() << " documents -> " << conversations[0] << " train / " << conversations[1]
       << " valid conversations (" << data.sft_format
       << (data.sft_format == "messages" ? std::string(", chat template ") + chat_template_name(chat) : "")
       << ") packed into " << rows[0].size() << " / "
       << rows[1].size() << " rows of <= " << data.seq_len << " tokens; " << truncated
       << " conversations cut to seq_len; " << global << " rows per step, " << std::fixed << std::setprecision(2)
       << double(train.steps * global) / double(rows[0].size()) << " epochs";
  out->set_description(desc.str());
  return out;
}

}  // namespace bb::train
