// SFT data: paragraph -> (prompt, response), ChatML turns, and packed batches with response-only masks.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "bumblebee/core/error.h"
#include "bumblebee/train/sft_data.h"
#include "tests/data/data_test_support.h"

namespace {

using namespace bb::train;

bb::Tokenizer tokenizer() { return bb::Tokenizer::from_file(BB_SOURCE_DIR "/data/tokenizer.json"); }

TEST(SftData, FirstSentenceSplit) {
  auto [p, r] = split_first_sentence("  The license is granted here. You may copy it.\nOr not!  ");
  EXPECT_EQ(p, "The license is granted here.");
  EXPECT_EQ(r, "You may copy it.\nOr not!");
  // "Hi." is too short to be a prompt and no later sentence end exists.
  auto [p2, r2] = split_first_sentence("Hi. there is more text without an end");
  EXPECT_EQ(p2, "");
  EXPECT_EQ(r2, "");
  // A sentence end with nothing after it is no split.
  EXPECT_EQ(split_first_sentence("Only one sentence in this paragraph.").first, "");
  EXPECT_EQ(split_first_sentence("Version 3.11 of Python is here? Yes it is.").first,
            "Version 3.11 of Python is here?");
}

TEST(SftData, ParagraphPairs) {
  const auto pairs = paragraph_pairs(
      "First paragraph starts here. Then continues.\n\nno sentence end here\n\nSecond real paragraph! With more.");
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].second, "Then continues.");
  EXPECT_EQ(pairs[1].first, "Second real paragraph!");
}

TEST(SftData, ChatmlTurnUsesSpecialTokens) {
  BB_SKIP_WITHOUT_PCRE2();
  const bb::Tokenizer tok = tokenizer();
  const int64_t im_start = *tok.token_to_id("<|im_start|>"), im_end = *tok.token_to_id("<|im_end|>");
  const bb::ConversationTurn t = chatml_turn(tok, "What is it?", "A license.");
  ASSERT_GT(t.prompt.size(), 4u);
  ASSERT_GT(t.response.size(), 2u);
  EXPECT_EQ(t.prompt.front(), im_start);
  EXPECT_EQ(std::count(t.prompt.begin(), t.prompt.end(), im_start), 2);
  EXPECT_EQ(std::count(t.prompt.begin(), t.prompt.end(), im_end), 1);
  EXPECT_EQ(t.response[t.response.size() - 2], im_end);
  std::vector<int32_t> all(t.prompt.begin(), t.prompt.end());
  all.insert(all.end(), t.response.begin(), t.response.end());
  EXPECT_EQ(tok.decode(all), "<|im_start|>user\nWhat is it?<|im_end|>\n<|im_start|>assistant\nA license.<|im_end|>\n");
}

TEST(SftData, BatchesMaskPromptsAndSplitDocuments) {
  BB_SKIP_WITHOUT_PCRE2();
  bb::test::TempDir dir;
  {
    std::ofstream f(dir / "chat.jsonl");
    for (int i = 0; i < 10; ++i)
      f << R"({"prompt": "Question number )" << i << R"(?", "response": "Answer )" << i << R"( is here."})" << "\n";
  }
  DataRecipe data;
  data.kind = "sft";
  data.jsonl = dir / "chat.jsonl";
  data.sft_format = "prompt_response";
  data.seq_len = 64;
  data.train_fraction = 0.8;
  data.valid_fraction = 0.2;
  TrainRecipe train;
  train.steps = 5;
  train.micro_batch_size = 2;
  train.num_microbatches = 1;
  train.eval_batches = 1;
  train.seed = 3;
  const bb::Tokenizer tok = tokenizer();
  const auto r0 = make_sft_data(tok, data, train, tok.vocab_size(), {0, 2});
  const auto r1 = make_sft_data(tok, data, train, tok.vocab_size(), {1, 2});
  for (int64_t step = 0; step < train.steps; ++step) {
    const bb::PackedBatch b = r0->train_batch(step);
    ASSERT_NO_THROW(b.validate());
    EXPECT_GE(b.num_seqs(), 2);   // two rows, each with at least one conversation
    double masked = 0;
    for (float m : b.loss_mask) masked += m;
    EXPECT_GT(masked, 0);
    EXPECT_LT(masked, double(b.total_tokens()));
    // Every sequence starts with the prompt: its first token is never a target.
    int64_t start = 0;
    for (int64_t len : b.seq_lens) {
      EXPECT_EQ(b.loss_mask[size_t(start)], 0.0f);
      EXPECT_EQ(b.input_ids[size_t(start)], *tok.token_to_id("<|im_start|>"));
      start += len;
    }
    EXPECT_NE(b.input_ids, r1->train_batch(step).input_ids) << "dp ranks must get different rows";
  }
  // 8 train documents of ~25 tokens: rows of <= 64 tokens hold two each, so 4 rows; the same
  // held-out documents (8 and 9) make the valid batch on every rank.
  ASSERT_EQ(r0->valid_batches().size(), 1u);
  const std::string valid = tok.decode(std::vector<int32_t>(r0->valid_batches()[0].input_ids.begin(),
                                                            r0->valid_batches()[0].input_ids.end()));
  EXPECT_NE(valid.find("Question number 8?"), std::string::npos) << valid;
  for (int64_t step = 0; step < train.steps; ++step) {
    const bb::PackedBatch b = r0->train_batch(step);
    const std::string text = tok.decode(std::vector<int32_t>(b.input_ids.begin(), b.input_ids.end()));
    EXPECT_EQ(text.find("number 8?"), std::string::npos) << "held-out text leaked into training";
    EXPECT_EQ(text.find("number 9?"), std::string::npos) << "held-out text leaked into training";
  }
}

TEST(SftData, TokensOutsideTheVocabularyAreAnError) {
  BB_SKIP_WITHOUT_PCRE2();
  bb::test::TempDir dir;
  {
    std::ofstream f(dir / "c.jsonl");
    f << R"({"text": "A paragraph with a first sentence. And a response."})" << "\n";
  }
  DataRecipe data;
  data.kind = "sft";
  data.jsonl = dir / "c.jsonl";
  data.jsonl_key = "text";
  data.sft_format = "paragraphs";
  data.seq_len = 64;
  data.train_fraction = 1;
  TrainRecipe train;
  train.steps = 1;
  train.micro_batch_size = 1;
  train.num_microbatches = 1;
  try {
    make_sft_data(tokenizer(), data, train, 100, {0, 1});
    FAIL() << "expected an error";
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the model's vocabulary of 100"), std::string::npos) << e.what();
  }
}

// A messages corpus of `lines` in dir/chat.jsonl, read with the tokenizer at dir/tokenizer.json.
DataRecipe messages_recipe(const bb::test::TempDir& dir, const std::vector<std::string>& lines) {
  {
    std::ofstream f(dir / "chat.jsonl");
    for (const std::string& l : lines) f << l << "\n";
    std::ofstream(dir / "tokenizer.json") << bb::test::read_file(BB_SOURCE_DIR "/data/tokenizer.json");
  }
  DataRecipe data;
  data.kind = "sft";
  data.tokenizer = dir / "tokenizer.json";
  data.jsonl = dir / "chat.jsonl";
  data.sft_format = "messages";
  data.seq_len = 128;
  data.train_fraction = 1;
  return data;
}

TrainRecipe one_row_steps() {
  TrainRecipe train;
  train.steps = 1;
  train.micro_batch_size = 1;
  train.num_microbatches = 1;
  return train;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const bb::Error& e) {
    return e.what();
  }
  return "";
}

TEST(SftData, MessagesAreRenderedByTheChatTemplateWithAssistantOnlyLoss) {
  BB_SKIP_WITHOUT_PCRE2();
  bb::test::TempDir dir;
  DataRecipe data = messages_recipe(dir, {R"({"messages": [{"role": "system", "content": "Be brief."}, )"
                                          R"({"role": "user", "content": "Hi?"}, )"
                                          R"({"role": "assistant", "content": "Hello."}]})"});
  // Recognised from tokenizer_config.json beside the tokenizer: Qwen3's template text.
  std::ofstream(dir / "tokenizer_config.json")
      << nlohmann::json({{"chat_template", nlohmann::json::parse(bb::test::read_file(
                             BB_SOURCE_DIR "/tests/fixtures/chat/expected.json"))["templates"]["qwen3"]}})
             .dump();
  const bb::Tokenizer tok = tokenizer();
  const auto d = make_sft_data(tok, data, one_row_steps(), tok.vocab_size(), {0, 1});
  EXPECT_NE(d->description().find("chat template qwen3"), std::string::npos) << d->description();
  const bb::PackedBatch b = d->train_batch(0);
  std::vector<int32_t> all(b.input_ids.begin(), b.input_ids.end()), trained;
  for (size_t i = 0; i < all.size(); ++i)
    if (b.loss_mask[i] > 0) trained.push_back(all[i]);
  EXPECT_EQ(tok.decode(all), "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n"
                             "<|im_start|>assistant\n<think>\n\n</think>\n\nHello.<|im_end|>\n");
  EXPECT_EQ(tok.decode(trained), "<think>\n\n</think>\n\nHello.<|im_end|>");
  // data.chat_template overrides the tokenizer's.
  data.chat_template = "chatml";
  const auto c = make_sft_data(tok, data, one_row_steps(), tok.vocab_size(), {0, 1});
  const bb::PackedBatch cb = c->train_batch(0);
  EXPECT_EQ(tok.decode(std::vector<int32_t>(cb.input_ids.begin(), cb.input_ids.end())),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n");
}

TEST(SftData, BadMessagesAreErrorsNamingTheDocument) {
  BB_SKIP_WITHOUT_PCRE2();
  bb::test::TempDir dir;
  const bb::Tokenizer tok = tokenizer();
  auto error = [&](const std::string& line, const std::string& chat_template) {
    DataRecipe data = messages_recipe(dir, {R"({"messages": [{"role": "user", "content": "ok"}]})", line});
    data.chat_template = chat_template;
    return error_of([&] { make_sft_data(tok, data, one_row_steps(), tok.vocab_size(), {0, 1}); });
  };
  EXPECT_NE(error(R"({"messages": [{"role": "tool", "content": "{}"}]})", "qwen3").find("document 2: chat message 1 "
            "has role \"tool\""), std::string::npos);
  EXPECT_NE(error(R"({"messages": [{"role": "user"}]})", "qwen3").find("document 2 message 1: no string field "
            "\"content\""), std::string::npos);
  EXPECT_NE(error(R"({"prompt": "a", "response": "b"})", "llama3").find("document 2: no non-empty \"messages\""),
            std::string::npos);
  // No data.chat_template and no tokenizer_config.json: the error says what to set.
  EXPECT_NE(error(R"({"messages": [{"role": "user", "content": "x"}]})", "").find("data.chat_template="),
            std::string::npos);
}

}  // namespace
