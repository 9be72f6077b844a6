// bb-data: build and inspect Megatron indexed datasets.
//
//   bb-data preprocess input=FILE.jsonl tokenizer=tokenizer.json out=PREFIX [key=text] [workers=N]
//       [append_eod=true] [eod_token=<|endoftext|>] [add_special_tokens=true] [on_error=fail|skip]
//     Tokenizes the `key` field of every JSONL line into PREFIX.bin / PREFIX.idx
//     (written atomically), with a progress bar on stderr and the throughput at the end.
//   bb-data inspect PREFIX
//     Prints {"dtype", "sequence_count", "document_count", "total_tokens"} as JSON.
// See docs/data.md.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bumblebee/core/error.h"
#include "bumblebee/data/indexed_dataset.h"
#include "bumblebee/data/preprocess.h"
#include "bumblebee/runtime/config_schema.h"
#include "bumblebee/runtime/tool_main.h"

using namespace bb;

namespace {

const char* kUsage =
    "usage: bb-data preprocess input=FILE.jsonl tokenizer=tokenizer.json out=PREFIX [key=text] [workers=N]\n"
    "                          [append_eod=true] [eod_token=<|endoftext|>] [add_special_tokens=true]\n"
    "                          [on_error=fail|skip]\n"
    "       bb-data inspect PREFIX\n"
    "       bb-data help    (preprocess's keys with their types, defaults and meaning)\n";

// Redraws one status line on stderr at most ten times a second; finish() draws the final state.
class ProgressBar {
 public:
  void update(const PreprocessProgress& p) {
    last_ = p;
    const auto now = std::chrono::steady_clock::now();
    drawn_ = now - last_draw_ >= std::chrono::milliseconds(100);
    if (!drawn_) return;
    last_draw_ = now;
    draw();
  }
  void finish() {
    if (!drawn_) draw();
    std::fputc('\n', stderr);
  }

 private:
  void draw() const {
    const double fraction = last_.total_bytes > 0 ? double(last_.bytes_read) / double(last_.total_bytes) : 1.0;
    const int width = 30, filled = int(fraction * width + 0.5);
    std::fprintf(stderr, "\r[%.*s%*s] %5.1f%%  %lld docs  %lld tokens  %.1f MB/s", filled,
                 "##############################", width - filled, "", 100.0 * fraction, (long long)last_.documents,
                 (long long)last_.tokens, last_.seconds > 0 ? double(last_.bytes_read) / 1e6 / last_.seconds : 0.0);
    std::fflush(stderr);
  }

  PreprocessProgress last_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

// preprocess's keys, through the schema every tool parses with.
ConfigSchema preprocess_schema() {
  const PreprocessOptions d;
  ConfigSchema s("bb-data preprocess", "bb-data preprocess input=FILE.jsonl tokenizer=tokenizer.json out=PREFIX [key=value ...]");
  using T = ConfigType;
  const std::string g = "preprocess";
  s.add({"input", g, T::String, "", "JSONL corpus (required)"});
  s.add({"tokenizer", g, T::String, "", "tokenizer.json (required)"});
  s.add({"out", g, T::String, "", "output prefix: writes PREFIX.bin and PREFIX.idx (required)"});
  s.add({"key", g, T::String, d.key, "field of each JSONL line holding the document text"});
  s.add(ConfigKey{"workers", g, T::Int, d.workers, "tokenizer threads"}.at_least(1));
  s.add({"append_eod", g, T::Bool, d.append_eod, "end every document with eod_token"});
  s.add({"eod_token", g, T::String, d.eod_token, "the end-of-document token"});
  s.add({"add_special_tokens", g, T::Bool, d.add_special_tokens, "apply the tokenizer's template (e.g. Llama 3's BOS)"});
  s.add(ConfigKey{"on_error", g, T::String, "fail", "a malformed line: fail, or skip it with a warning"}.one_of({"fail", "skip"}));
  return s;
}

int preprocess(int argc, char** argv) {
  const ConfigSchema schema = preprocess_schema();
  if (asks_for_help(argc, argv, 2)) {
    std::fputs(schema.help().c_str(), stdout);
    return 0;
  }
  const ConfigArgs args = schema.parse(argc, argv, 2);
  for (const char* required : {"input", "tokenizer", "out"})
    BB_CHECK(args.has(required), "preprocess needs input=FILE.jsonl tokenizer=tokenizer.json out=PREFIX; ",
             required, "= is missing");
  PreprocessOptions opt;
  opt.input = args.str("input");
  opt.output_prefix = args.str("out");
  opt.key = args.str("key");
  opt.workers = args.integer("workers");
  opt.append_eod = args.flag("append_eod");
  opt.eod_token = args.str("eod_token");
  opt.add_special_tokens = args.flag("add_special_tokens");
  opt.skip_malformed = args.str("on_error") == "skip";

  const Tokenizer tokenizer = Tokenizer::from_file(args.str("tokenizer"));
  ProgressBar bar;
  const PreprocessStats s = preprocess_jsonl(
      tokenizer, opt, [&](const PreprocessProgress& p) { bar.update(p); },
      [](const std::string& warning) { std::fprintf(stderr, "\nwarning: %s\n", warning.c_str()); });
  bar.finish();
  const double secs = std::max(s.seconds, 1e-9);
  std::fprintf(stderr,
               "wrote %s.bin/.idx: %lld documents, %lld tokens (%s), %lld malformed lines skipped, "
               "%lld empty documents dropped\n"
               "throughput: %.0f docs/s, %.0f tokens/s, %.2f MB/s (%.2f s, workers=%lld)\n",
               opt.output_prefix.c_str(), (long long)s.documents, (long long)s.tokens, indexed_dtype_name(s.dtype),
               (long long)s.malformed_lines, (long long)s.empty_documents, double(s.documents) / secs,
               double(s.tokens) / secs, double(s.bytes) / 1e6 / secs, s.seconds, (long long)opt.workers);
  return 0;
}

int inspect(int argc, char** argv) {
  BB_CHECK(argc == 3, "inspect takes one PREFIX (of PREFIX.bin / PREFIX.idx), got ", argc - 2, " arguments");
  const IndexedDataset ds(argv[2]);
  const nlohmann::json out = {
      {"dtype", indexed_dtype_name(ds.dtype())},
      {"sequence_count", ds.sequence_count()},
      {"document_count", ds.document_count()},
      {"total_tokens", ds.total_tokens()},
  };
  std::cout << out.dump() << "\n";
  return 0;
}

int run(int argc, char** argv) {
  const std::string command = argc >= 2 ? argv[1] : "";
  if (command == "preprocess") return preprocess(argc, argv);
  if (command == "inspect") return inspect(argc, argv);
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(kUsage, stdout);
    std::fputs(("\n" + preprocess_schema().help()).c_str(), stdout);
    return 0;
  }
  std::fputs(kUsage, stderr);
  BB_FAIL(command.empty() ? "no command given" : "unknown command '" + command + "'");
}

}  // namespace

int main(int argc, char** argv) { return run_tool(argc, argv, run); }
