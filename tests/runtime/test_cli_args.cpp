// Tests of parse_key_values: splitting key=value words, and the errors users see.
#include "bumblebee/runtime/cli_args.h"

#include <gtest/gtest.h>

#include <functional>

#include "bumblebee/core/error.h"

namespace bb {
namespace {

const std::set<std::string> kKeys = {"backend", "hf_path", "backend.parallel.tp", "backend.parallel.ep",
                                     "bench.steps", "bench.lr", "bench.warmup", "bench.profile"};

std::vector<KeyValue> parse(const std::vector<std::string>& words) { return parse_key_values(words, kKeys, "bb-bench"); }

// Runs `f`, expecting a bb::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
        << "message '" << e.what() << "' lacks '" << p << "'";
    return;
  }
  ADD_FAILURE() << "no bb::Error thrown";
}

TEST(KeyValueArgs, SplitsAtTheFirstEqualsInCommandLineOrder) {
  const std::vector<KeyValue> kv = parse({"backend=bb", "hf_path=/data/q=3", "backend.parallel.tp=4", "bench.lr="});
  ASSERT_EQ(kv.size(), 4u);
  EXPECT_EQ(kv[0].key, "backend");
  EXPECT_EQ(kv[0].value, "bb");
  EXPECT_EQ(kv[1].value, "/data/q=3");  // split at the first '=' only
  EXPECT_EQ(kv[2].key, "backend.parallel.tp");
  EXPECT_EQ(kv[3].value, "");
  EXPECT_TRUE(parse({}).empty());
}

TEST(KeyValueArgs, BareWordsAreErrors) {
  expect_error([] { parse({"backend=bb", "garbage"}); },
               {"argument 'garbage' is not key=value", "bb-bench help lists the keys"});
}

TEST(KeyValueArgs, UnknownKeySuggestsNearest) {
  expect_error([] { parse({"backend.paralel.tp=4"}); },
               {"unknown key 'backend.paralel.tp'; did you mean 'backend.parallel.tp'?"});
  expect_error([] { parse({"bench.stesp=4"}); }, {"did you mean 'bench.steps'?"});
  expect_error([] { parse({"tp=4"}); }, {"unknown key 'tp'", "did you mean 'backend.parallel.tp'?"});
  expect_error([] { parse({"completely_unrelated_option=1"}); },
               {"unknown key 'completely_unrelated_option'", "known keys:", "bench.steps"});
  EXPECT_EQ(suggest_key("warmup", kKeys), "bench.warmup");
  EXPECT_EQ(suggest_key("zzzzzzzzzzzz", kKeys), "");
}

TEST(KeyValueArgs, RepeatedAndEmptyKeysAreErrors) {
  expect_error([] { parse({"bench.steps=1", "bench.steps=2"}); },
               {"key 'bench.steps' given twice", "bench.steps=1", "bench.steps=2"});
  expect_error([] { parse({"=3"}); }, {"'=3'", "no key"});
}

}  // namespace
}  // namespace bb
