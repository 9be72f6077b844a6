// preprocess_jsonl: output equals tokenizer ids + EOD per document, independent of worker count;
// malformed lines are reported by line number and skipped or fatal.
#include "bumblebee/data/preprocess.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data_test_support.h"

using bb::test::error_message;
using bb::test::read_file;
using bb::test::TempDir;
using bb::test::write_file;

namespace {

const std::vector<std::string> kTexts = {
    "The quick brown fox.", "Second document,\nwith a newline.", "\u4f60\u597d \U0001F916", "<|im_start|>x<|im_end|>",
};

std::string jsonl(const std::vector<std::string>& texts) {
  std::string out;
  for (const auto& t : texts) out += nlohmann::json({{"text", t}, {"id", 1}}).dump() + "\n";
  return out;
}

bb::Tokenizer tokenizer() { return bb::Tokenizer::from_file(BB_SOURCE_DIR "/data/tokenizer.json"); }

}  // namespace

TEST(Preprocess, WritesTokenizedDocumentsWithEod) {
  BB_SKIP_WITHOUT_PCRE2();
  TempDir dir;
  std::vector<std::string> texts;
  for (int r = 0; r < 50; ++r) texts.insert(texts.end(), kTexts.begin(), kTexts.end());
  write_file(dir / "in.jsonl", jsonl(texts) + "\n  \n");   // blank lines are ignored
  const bb::Tokenizer tok = tokenizer();
  bb::PreprocessOptions opt{.input = dir / "in.jsonl", .output_prefix = dir / "one"};
  int progress_calls = 0;
  const auto stats = bb::preprocess_jsonl(tok, opt, [&](const bb::PreprocessProgress&) { ++progress_calls; }, {});
  EXPECT_GE(progress_calls, 1);
  EXPECT_EQ(stats.documents, 200);
  EXPECT_EQ(stats.malformed_lines, 0);
  EXPECT_EQ(stats.dtype, bb::IndexedDType::UInt16);

  const bb::IndexedDataset ds(dir / "one");
  ASSERT_EQ(ds.sequence_count(), 200);
  EXPECT_EQ(ds.document_count(), 200);
  int64_t total = 0;
  for (int64_t i = 0; i < ds.sequence_count(); ++i) {
    std::vector<int32_t> ids = tok.encode(texts[size_t(i)]);
    ids.push_back(2045);   // <|endoftext|>
    ASSERT_EQ(ds.get(i), std::vector<int64_t>(ids.begin(), ids.end())) << "document " << i;
    total += int64_t(ids.size());
  }
  EXPECT_EQ(stats.tokens, total);

  opt.output_prefix = dir / "four";
  opt.workers = 4;
  bb::preprocess_jsonl(tok, opt, {}, {});
  EXPECT_EQ(read_file(dir / "four.bin"), read_file(dir / "one.bin"));
  EXPECT_EQ(read_file(dir / "four.idx"), read_file(dir / "one.idx"));
}

TEST(Preprocess, MalformedLinesSkipOrFail) {
  BB_SKIP_WITHOUT_PCRE2();
  TempDir dir;
  write_file(dir / "in.jsonl", "{\"text\": \"good\"}\n{\"text\": \"also good\"}\n{\"text\": oops}\n[1, 2]\n"
                               "{\"body\": \"x\"}\n{\"text\": 5}\n{\"text\": \"last\"}\n");
  const bb::Tokenizer tok = tokenizer();
  bb::PreprocessOptions opt{.input = dir / "in.jsonl", .output_prefix = dir / "out"};
  const std::string msg = error_message([&] { bb::preprocess_jsonl(tok, opt, {}, {}); });
  EXPECT_NE(msg.find("in.jsonl:3: malformed JSON"), std::string::npos) << msg;
  EXPECT_TRUE(std::filesystem::exists(dir / "in.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out.idx"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1)
      << "a failed run must leave no output or temporary files";

  opt.skip_malformed = true;
  std::vector<std::string> warnings;
  const auto stats = bb::preprocess_jsonl(tok, opt, {}, [&](const std::string& w) { warnings.push_back(w); });
  EXPECT_EQ(stats.documents, 3);
  EXPECT_EQ(stats.malformed_lines, 4);
  ASSERT_EQ(warnings.size(), 4u);
  EXPECT_NE(warnings[0].find("in.jsonl:3: malformed JSON"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("in.jsonl:4: expected a JSON object, found array"), std::string::npos) << warnings[1];
  EXPECT_NE(warnings[2].find("in.jsonl:5: no \"text\" field"), std::string::npos) << warnings[2];
  EXPECT_NE(warnings[3].find("in.jsonl:6: field \"text\" is number, not a string"), std::string::npos) << warnings[3];
  EXPECT_EQ(bb::IndexedDataset(dir / "out").get(2).front(), tok.encode("last").front());
}

TEST(Preprocess, OptionsAreChecked) {
  BB_SKIP_WITHOUT_PCRE2();
  TempDir dir;
  write_file(dir / "in.jsonl", "{\"text\": \"a\"}\n");
  const bb::Tokenizer tok = tokenizer();
  bb::PreprocessOptions opt{.input = dir / "in.jsonl", .output_prefix = dir / "out", .eod_token = "</s>"};
  EXPECT_NE(error_message([&] { bb::preprocess_jsonl(tok, opt, {}, {}); })
                .find("end-of-document token '</s>' is not in"),
            std::string::npos);
  opt.append_eod = false;
  opt.input = dir / "missing.jsonl";
  EXPECT_NE(error_message([&] { bb::preprocess_jsonl(tok, opt, {}, {}); })
                .find("JSONL input " + opt.input + " does not exist"),
            std::string::npos);
}
