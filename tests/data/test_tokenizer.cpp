// Tokenizer: ids must equal HF `tokenizers` on the fixture texts (both tokenizer layouts),
// plus hand-checked BPE rules and load-time errors on small synthetic tokenizer.json files.
#include "bumblebee/data/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "bumblebee/core/error.h"
#include "data_test_support.h"
#include "bumblebee/data/byte_level.h"

using json = nlohmann::json;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return json::parse(in);
}

void check_against_hf(const std::string& tokenizer_path, const std::string& expected_path) {
  const bb::Tokenizer tok = bb::Tokenizer::from_file(tokenizer_path);
  const json expected = read_json(expected_path);
  ASSERT_GT(expected["cases"].size(), 50u);
  for (const json& c : expected["cases"]) {
    const std::string text = c["text"];
    const bool add_special = c["add_special_tokens"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto ids = tok.encode(text, add_special);
    EXPECT_EQ(ids, want) << "text: " << json(text).dump() << " add_special_tokens=" << add_special;
    EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>()) << json(text).dump();
  }
  for (const json& c : expected["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.decode(ids, c.value("skip_special_tokens", false)), c["decoded"].get<std::string>())
        << c["ids"].dump();
  }
}

// A tokenizer.json over the byte alphabet plus `extra` tokens, with the given merges.
json tiny_tokenizer(const std::vector<std::string>& extra, const json& merges, bool ignore_merges) {
  json vocab = json::object();
  int id = 0;
  for (const auto& c : bb::byte_level::byte_chars()) vocab[c] = id++;
  for (const auto& t : extra) vocab[t] = id++;
  return {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", ignore_merges}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", json::array()},
  };
}

bb::Tokenizer load(const json& j) { return bb::Tokenizer::from_json(j.dump(), "tiny.json"); }

std::string error_of(const json& j) {
  try {
    load(j);
  } catch (const bb::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Tokenizer, MatchesHfOnQwen2StyleTokenizer) {
  BB_SKIP_WITHOUT_PCRE2();
  check_against_hf(BB_SOURCE_DIR "/data/tokenizer.json", BB_SOURCE_DIR "/tests/fixtures/tokenizer/qwen2_style_expected.json");
}

TEST(Tokenizer, MatchesHfOnLlama3StyleTokenizer) {
  BB_SKIP_WITHOUT_PCRE2();
  check_against_hf(BB_SOURCE_DIR "/tests/fixtures/tokenizer/llama3_tokenizer.json",
                   BB_SOURCE_DIR "/tests/fixtures/tokenizer/llama3_style_expected.json");
}

TEST(Tokenizer, ShippedTokenizerShape) {
  BB_SKIP_WITHOUT_PCRE2();
  const bb::Tokenizer tok = bb::Tokenizer::from_file(BB_SOURCE_DIR "/data/tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 2048);
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 2045);
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), 2047);
  EXPECT_TRUE(tok.is_special(2046));
  EXPECT_FALSE(tok.is_special(100));
  EXPECT_EQ(tok.id_to_token(2046), "<|im_start|>");
  EXPECT_FALSE(tok.token_to_id("no such token").has_value());
}

TEST(Tokenizer, RoundTripsText) {
  BB_SKIP_WITHOUT_PCRE2();
  const bb::Tokenizer tok = bb::Tokenizer::from_file(BB_SOURCE_DIR "/data/tokenizer.json");
  for (const std::string text : {"Hello,  world!\n\n", "<|im_start|>user\nx<|im_end|>", "\u4f60\u597d \U0001F916 \t"})
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST(Tokenizer, MergesApplyByRankNotPosition) {
  BB_SKIP_WITHOUT_PCRE2();
  // "abc": rank 0 is "b c", so "a b" (rank 1) never fires; "a bc" (rank 2) finishes the word.
  const bb::Tokenizer tok = load(tiny_tokenizer({"bc", "ab", "abc"}, {"b c", "a b", "a bc"}, false));
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{258}));
  EXPECT_EQ(tok.encode("abd"), (std::vector<int32_t>{257, 'd'}));
  // Equal pairs merge leftmost first: "aaa" with "a a" -> "aa" + "a".
  const bb::Tokenizer aa = load(tiny_tokenizer({"aa"}, json::array({json::array({"a", "a"})}), false));
  EXPECT_EQ(aa.encode("aaa"), (std::vector<int32_t>{256, 'a'}));
  EXPECT_EQ(aa.encode("aaaa"), (std::vector<int32_t>{256, 256}));
}

TEST(Tokenizer, IgnoreMergesTakesWholeWordsFromTheVocab) {
  BB_SKIP_WITHOUT_PCRE2();
  // "abc" is in the vocab but no merge reaches it.
  EXPECT_EQ(load(tiny_tokenizer({"abc"}, json::array(), false)).encode("abc"),
            (std::vector<int32_t>{'a', 'b', 'c'}));
  EXPECT_EQ(load(tiny_tokenizer({"abc"}, json::array(), true)).encode("abc"), (std::vector<int32_t>{256}));
}

TEST(Tokenizer, AddedTokensLongestMatchAndStrip) {
  BB_SKIP_WITHOUT_PCRE2();
  json j = tiny_tokenizer({}, json::array(), false);
  j["added_tokens"] = {
      {{"id", 300}, {"content", "<s>"}, {"special", true}, {"lstrip", false}, {"rstrip", true}},
      {{"id", 301}, {"content", "<s>x"}, {"special", false}, {"lstrip", true}, {"rstrip", false}},
  };
  const bb::Tokenizer tok = load(j);
  EXPECT_EQ(tok.vocab_size(), 302);
  EXPECT_EQ(tok.encode("<s>  y"), (std::vector<int32_t>{300, 'y'}));       // rstrip eats both spaces
  EXPECT_EQ(tok.encode("y \u3000<s>x"), (std::vector<int32_t>{'y', 301}));  // lstrip eats Unicode space too
  EXPECT_EQ(tok.decode({300, 'y', 301}, true), "y<s>x");                    // only special ids are skipped
}

TEST(Tokenizer, UnsupportedLayoutsAreLoadErrors) {
  BB_SKIP_WITHOUT_PCRE2();
  json j = tiny_tokenizer({}, json::array(), false);
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(error_of(j).find("model type 'WordPiece' is not supported"), std::string::npos) << error_of(j);

  j = tiny_tokenizer({}, json::array(), false);
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(error_of(j).find("normalizer type 'NFKC'"), std::string::npos) << error_of(j);

  j = tiny_tokenizer({}, json::array(), false);
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(error_of(j).find("pre_tokenizer type 'Whitespace'"), std::string::npos) << error_of(j);

  j = tiny_tokenizer({}, {"a q"}, false);   // "aq" is not in the vocab
  EXPECT_NE(error_of(j).find("merge 0 ('a q') makes 'aq', which is missing from the vocab"), std::string::npos)
      << error_of(j);

  j = tiny_tokenizer({}, json::array(), false);
  j["model"]["vocab"].erase("\u0120");
  EXPECT_NE(error_of(j).find("lacks the symbol"), std::string::npos) << error_of(j);

  EXPECT_THROW(bb::Tokenizer::from_json("{not json", "x.json"), bb::Error);
  EXPECT_THROW(bb::Tokenizer::from_file("/nonexistent/tokenizer.json"), bb::Error);
}

TEST(Tokenizer, BadInputsAreErrors) {
  BB_SKIP_WITHOUT_PCRE2();
  const bb::Tokenizer tok = bb::Tokenizer::from_file(BB_SOURCE_DIR "/data/tokenizer.json");
  EXPECT_THROW(tok.encode("bad \xff byte"), bb::Error);
  try {
    tok.decode({5, 4096});
    FAIL() << "no error";
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 4096 is outside the vocabulary"), std::string::npos) << e.what();
  }
}

// Found by the tokenizer_json fuzz target: an id of 2^31-1 overflowed sizing the id
// table, larger ones were truncated to another id. One row per bad id.
TEST(Tokenizer, TokenIdsOutOfRangeAreLoadErrors) {
  BB_SKIP_WITHOUT_PCRE2();
  struct Row {
    const char* where;
    json id;
    const char* words;
  };
  const Row rows[] = {
      {"vocab", 2147483647, "has id 2147483647, expected an integer in [0, 16777215]"},
      {"vocab", json(uint64_t(1) << 40), "has id 1099511627776"},
      {"vocab", -5, "has id -5"},
      {"vocab", "3", "has id \"3\""},
      {"added", json(uint64_t(18446744073709551615ull)), "has id 18446744073709551615"},
      {"added", -1, "has id -1"},
  };
  for (const Row& r : rows) {
    json j = tiny_tokenizer({"ab"}, json::array(), false);
    if (std::string(r.where) == "vocab") {
      j["model"]["vocab"]["ab"] = r.id;
    } else {
      j["added_tokens"] = {{{"id", r.id}, {"content", "<s>"}, {"special", true}}};
    }
    EXPECT_NE(error_of(j).find(r.words), std::string::npos) << r.where << " " << r.id.dump() << ": " << error_of(j);
  }
}
