// preprocess_jsonl: chunked reading, ordered multi-threaded tokenization, dataset writing.
#include "bumblebee/data/preprocess.h"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bumblebee/core/error.h"
#include "bumblebee/core/input_file.h"
#include "bumblebee/data/indexed_dataset_builder.h"

namespace bb {

namespace {

constexpr size_t kChunkLines = 2048;
constexpr size_t kChunkBytes = 16 << 20;

struct Line {
  int64_t number = 0;   // 1-based
  std::string text;
};

struct Tokenized {
  std::vector<int32_t> ids;
  std::string error;    // non-empty: malformed line
};

bool blank(const std::string& s) {
  return s.find_first_not_of(" \t\r\n") == std::string::npos;
}

Tokenized tokenize_line(const Tokenizer& tokenizer, const PreprocessOptions& opt, const Line& line) {
  Tokenized out;
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(line.text);
  } catch (const nlohmann::json::exception& e) {
    out.error = std::string("malformed JSON: ") + e.what();
    return out;
  }
  if (!doc.is_object()) {
    out.error = "expected a JSON object, found " + std::string(doc.type_name());
  } else if (!doc.contains(opt.key)) {
    out.error = "no \"" + opt.key + "\" field";
  } else if (!doc[opt.key].is_string()) {
    out.error = "field \"" + opt.key + "\" is " + doc[opt.key].type_name() + ", not a string";
  } else {
    try {
      out.ids = tokenizer.encode(doc[opt.key].get_ref<const std::string&>(), opt.add_special_tokens);
    } catch (const Error& e) {
      out.error = e.what();
    }
  }
  return out;
}

}  // namespace

PreprocessStats preprocess_jsonl(const Tokenizer& tokenizer, const PreprocessOptions& opt,
                                 const std::function<void(const PreprocessProgress&)>& on_progress,
                                 const std::function<void(const std::string&)>& on_warning) {
  BB_CHECK(opt.workers >= 1, "workers must be at least 1, got ", opt.workers);
  BB_CHECK(!opt.output_prefix.empty(), "no output prefix given");
  int32_t eod = -1;
  if (opt.append_eod) {
    const auto id = tokenizer.token_to_id(opt.eod_token);
    BB_CHECK(id.has_value(), "end-of-document token '", opt.eod_token, "' is not in ", tokenizer.source(),
             " (set eod_token= or append_eod=false)");
    eod = *id;
  }
  std::ifstream in = open_input_file(opt.input, "JSONL input", std::ios::binary | std::ios::ate);
  PreprocessStats stats;
  PreprocessProgress progress;
  progress.total_bytes = int64_t(in.tellg());
  in.seekg(0);
  stats.dtype = indexed_dtype_for_vocab(tokenizer.vocab_size());
  IndexedDatasetBuilder builder(opt.output_prefix, stats.dtype);
  const auto start = std::chrono::steady_clock::now();

  std::vector<Line> chunk;
  std::vector<Tokenized> results;
  int64_t line_number = 0;
  std::string text;
  bool more = true;
  while (more) {
    chunk.clear();
    size_t chunk_bytes = 0;
    while (chunk.size() < kChunkLines && chunk_bytes < kChunkBytes) {
      if (!std::getline(in, text)) {
        more = false;
        break;
      }
      ++line_number;
      // +1 for the newline getline consumed (the last line may lack one).
      progress.bytes_read = std::min(progress.total_bytes, progress.bytes_read + int64_t(text.size()) + 1);
      if (blank(text)) continue;
      chunk_bytes += text.size();
      chunk.push_back({line_number, std::move(text)});
    }
    results.assign(chunk.size(), Tokenized());
    const size_t workers = std::min<size_t>(size_t(opt.workers), std::max<size_t>(chunk.size(), 1));
    auto work = [&](size_t w) {
      for (size_t i = w; i < chunk.size(); i += workers) results[i] = tokenize_line(tokenizer, opt, chunk[i]);
    };
    std::vector<std::thread> threads;
    for (size_t w = 1; w < workers; ++w) threads.emplace_back(work, w);
    work(0);
    for (auto& t : threads) t.join();

    for (size_t i = 0; i < chunk.size(); ++i) {
      Tokenized& r = results[i];
      if (!r.error.empty()) {
        const std::string where = opt.input + ":" + std::to_string(chunk[i].number) + ": ";
        BB_CHECK(opt.skip_malformed, where, r.error, " (on_error=skip skips such lines)");
        ++stats.malformed_lines;
        if (on_warning) on_warning(where + r.error + "; skipped");
        continue;
      }
      if (eod >= 0) r.ids.push_back(eod);
      if (r.ids.empty()) {
        ++stats.empty_documents;
        continue;
      }
      builder.add_document(std::span<const int32_t>(r.ids));
      ++stats.documents;
      stats.tokens += int64_t(r.ids.size());
    }
    progress.documents = stats.documents;
    progress.tokens = stats.tokens;
    progress.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (on_progress) on_progress(progress);
  }
  BB_CHECK(!in.bad(), "reading ", opt.input, " failed");
  builder.finalize();
  stats.bytes = progress.bytes_read;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace bb
