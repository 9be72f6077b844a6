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
#include "bumblebee/runtime/cli_args.h"
#include "bumblebee/runtime/tool_main.h"

using namespace bb;

namespace {

const char* kUsage =
    "usage: bb-data preprocess input=FILE.jsonl tokenizer=tokenizer.json out=PREFIX [key=text] [workers=N]\n"
    "                          [append_eod=true] [eod_token=<|endoftext|>] [add_special_tokens=true]\n"
    "                          [on_error=fail|skip]\n"
    "       bb-data inspect PREFIX\n";

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

int preprocess(int argc, char** argv) {
  const auto args = KeyValueArgs::parse(
      argc, argv,
      {"input", "tokenizer", "out", "key", "workers", "append_eod", "eod_token", "add_special_tokens", "on_error"}, 2);
  BB_CHECK(args.positional().empty(), "unexpected argument '", args.positional().front(), "' (arguments are key=value)");
  for (const char* required : {"input", "tokenizer", "out"})
    BB_CHECK(args.has(required), "preprocess needs input=FILE.jsonl tokenizer=tokenizer.json out=PREFIX; ",
             required, "= is missing");
  PreprocessOptions opt;
  opt.input = args.get("input", "");
  opt.output_prefix = args.get("out", "");
  opt.key = args.get("key", opt.key);
  opt.workers = args.get_int("workers", opt.workers);
  opt.append_eod = args.get_bool("append_eod", opt.append_eod);
  opt.eod_token = args.get("eod_token", opt.eod_token);
  opt.add_special_tokens = args.get_bool("add_special_tokens", opt.add_special_tokens);
  const std::string on_error = args.get("on_error", "fail");
  BB_CHECK(on_error == "fail" || on_error == "skip", "on_error must be fail or skip, got '", on_error, "'");
  opt.skip_malformed = on_error == "skip";

  const Tokenizer tokenizer = Tokenizer::from_file(args.get("tokenizer", ""));
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
  const auto args = KeyValueArgs::parse(argc, argv, {}, 2);
  BB_CHECK(args.positional().size() == 1, "inspect takes one PREFIX (of PREFIX.bin / PREFIX.idx), got ",
           args.positional().size(), " arguments");
  const IndexedDataset ds(args.positional().front());
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
  std::fputs(kUsage, stderr);
  BB_FAIL(command.empty() ? "no command given" : "unknown command '" + command + "'");
}

}  // namespace

int main(int argc, char** argv) { return run_tool(argc, argv, run); }
