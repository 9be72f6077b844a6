// Tests of KeyValueArgs: parsing, typed getters, and the errors users see.
#include "bumblebee/runtime/cli_args.h"

#include <gtest/gtest.h>

#include <functional>

#include "bumblebee/core/error.h"

namespace bb {
namespace {

const std::vector<std::string> kKeys = {"backend", "hf_path", "backend.parallel.tp", "backend.parallel.ep",
                                        "bench.steps", "bench.lr", "bench.warmup", "bench.profile"};

KeyValueArgs parse(std::vector<std::string> args, size_t first = 1) {
  args.insert(args.begin(), "bb-bench");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return KeyValueArgs::parse(int(argv.size()), argv.data(), kKeys, first);
}

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

TEST(KeyValueArgs, ParsesTypedValuesAndPositional) {
  KeyValueArgs a = parse({"backend=bb", "run", "hf_path=/data/q=3", "backend.parallel.tp=4", "bench.lr=3e-4",
                          "bench.warmup=-2", "bench.profile=true", "extra"});
  EXPECT_TRUE(a.has("backend"));
  EXPECT_FALSE(a.has("bench.steps"));
  EXPECT_EQ(a.get("backend", "ref"), "bb");
  EXPECT_EQ(a.get("hf_path", ""), "/data/q=3");  // split at the first '=' only
  EXPECT_EQ(a.get_int("backend.parallel.tp", 1), 4);
  EXPECT_EQ(a.get_int("bench.warmup", 0), -2);
  EXPECT_DOUBLE_EQ(a.get_double("bench.lr", 0.0), 3e-4);
  EXPECT_TRUE(a.get_bool("bench.profile", false));
  EXPECT_EQ(a.positional(), (std::vector<std::string>{"run", "extra"}));
  EXPECT_EQ(a.values().size(), 6u);
}

TEST(KeyValueArgs, DefaultsWhenAbsent) {
  KeyValueArgs a = parse({});
  EXPECT_EQ(a.get("backend", "ref"), "ref");
  EXPECT_EQ(a.get_int("bench.steps", 10), 10);
  EXPECT_DOUBLE_EQ(a.get_double("bench.lr", 0.5), 0.5);
  EXPECT_FALSE(a.get_bool("bench.profile", false));
  EXPECT_TRUE(a.positional().empty());
}

TEST(KeyValueArgs, FirstSkipsLeadingArguments) {
  KeyValueArgs a = parse({"subcommand", "bench.steps=7"}, 2);
  EXPECT_TRUE(a.positional().empty());
  EXPECT_EQ(a.get_int("bench.steps", 0), 7);
}

TEST(KeyValueArgs, BoolAcceptsTrueFalseOneZero) {
  EXPECT_TRUE(parse({"bench.profile=1"}).get_bool("bench.profile", false));
  EXPECT_FALSE(parse({"bench.profile=0"}).get_bool("bench.profile", true));
  EXPECT_FALSE(parse({"bench.profile=false"}).get_bool("bench.profile", true));
  expect_error([] { parse({"bench.profile=yes"}).get_bool("bench.profile", false); }, {"bench.profile", "'yes'"});
}

TEST(KeyValueArgs, UnknownKeySuggestsNearest) {
  expect_error([] { parse({"backend.paralel.tp=4"}); },
               {"unknown key 'backend.paralel.tp'; did you mean 'backend.parallel.tp'?"});
  expect_error([] { parse({"bench.stesp=4"}); }, {"did you mean 'bench.steps'?"});
  expect_error([] { parse({"tp=4"}); }, {"unknown key 'tp'", "did you mean 'backend.parallel.tp'?"});
  expect_error([] { parse({"completely_unrelated_option=1"}); },
               {"unknown key 'completely_unrelated_option'", "known keys:", "bench.steps"});
}

TEST(KeyValueArgs, MalformedNumbersNameKeyAndValue) {
  expect_error([] { parse({"bench.steps=10x"}).get_int("bench.steps", 0); }, {"bench.steps", "'10x'", "integer"});
  expect_error([] { parse({"bench.steps=1.5"}).get_int("bench.steps", 0); }, {"bench.steps", "'1.5'"});
  expect_error([] { parse({"bench.steps="}).get_int("bench.steps", 0); }, {"bench.steps", "''"});
  expect_error([] { parse({"bench.steps=99999999999999999999"}).get_int("bench.steps", 0); },
               {"bench.steps", "99999999999999999999", "64-bit"});
  expect_error([] { parse({"bench.lr=fast"}).get_double("bench.lr", 0); }, {"bench.lr", "'fast'", "number"});
  expect_error([] { parse({"bench.lr=1e-3abc"}).get_double("bench.lr", 0); }, {"bench.lr", "'1e-3abc'"});
}

TEST(KeyValueArgs, RepeatedAndEmptyKeysAreErrors) {
  expect_error([] { parse({"bench.steps=1", "bench.steps=2"}); },
               {"key 'bench.steps' given twice", "bench.steps=1", "bench.steps=2"});
  expect_error([] { parse({"=3"}); }, {"'=3'", "no key"});
}

TEST(KeyValueArgs, ReadingAnUndeclaredKeyIsAnError) {
  KeyValueArgs a = parse({});
  expect_error([&] { a.get("bench.seq_len", ""); }, {"bench.seq_len", "did not declare"});
}

}  // namespace
}  // namespace bb
