// Chat templates against HF: token ids and assistant masks of tests/fixtures/chat/expected.json, made by
// transformers' apply_chat_template (make_chat_fixtures.py); recognition of the templates the fixture holds.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "bumblebee/core/error.h"
#include "bumblebee/data/chat_template.h"
#include "tests/data/data_test_support.h"

namespace {

using namespace bb;

nlohmann::json fixture() {
  return nlohmann::json::parse(test::read_file(BB_SOURCE_DIR "/tests/fixtures/chat/expected.json"));
}

std::vector<ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j)
    out.push_back({m["role"], m["content"], m.value("reasoning_content", std::string())});
  return out;
}

TEST(ChatTemplate, MatchesHfApplyChatTemplate) {
  BB_SKIP_WITHOUT_PCRE2();
  const nlohmann::json fx = fixture();
  ASSERT_EQ(fx["cases"].size(), 20u);
  for (const auto& c : fx["cases"]) {
    const Tokenizer tok = Tokenizer::from_file(BB_SOURCE_DIR "/" + c["tokenizer"].get<std::string>());
    const ChatTemplate t = chat_template_from_name(c["template"]);
    const std::vector<ChatMessage> messages = messages_of(c["messages"]);
    std::string text;
    for (const ChatSegment& s : render_chat(t, messages)) text += s.text;
    EXPECT_EQ(text, c["text"].get<std::string>()) << c["template"];
    std::vector<int64_t> ids;
    std::vector<int> mask;
    for (const ConversationTurn& turn : tokenize_chat(tok, t, messages)) {
      ids.insert(ids.end(), turn.prompt.begin(), turn.prompt.end());
      mask.insert(mask.end(), turn.prompt.size(), 0);
      ids.insert(ids.end(), turn.response.begin(), turn.response.end());
      mask.insert(mask.end(), turn.response.size(), 1);
    }
    EXPECT_EQ(ids, c["ids"].get<std::vector<int64_t>>()) << c["template"] << ": " << c["text"];
    EXPECT_EQ(mask, c["assistant_masks"].get<std::vector<int>>()) << c["template"] << ": " << c["text"];
  }
}

TEST(ChatTemplate, RecognisesTheFamilyOfHfTemplates) {
  const nlohmann::json fx = fixture();
  for (const auto& [name, jinja] : fx["templates"].items())
    EXPECT_EQ(chat_template_name(recognise_chat_template(jinja, "fixture")), name);
}

TEST(ChatTemplate, ReadsTokenizerConfig) {
  test::TempDir dir;
  {
    std::ofstream f(dir / "tokenizer_config.json");
    f << nlohmann::json({{"chat_template", fixture()["templates"]["llama3.1"]}}).dump();
  }
  EXPECT_EQ(chat_template_from_tokenizer_config(dir / "tokenizer_config.json"), ChatTemplate::Llama31);
  {
    std::ofstream f(dir / "none.json");
    f << R"({"bos_token": "<s>"})";
  }
  EXPECT_THROW(chat_template_from_tokenizer_config(dir / "none.json"), Error);
}

TEST(ChatTemplate, UnknownTemplatesAreErrorsNamingThem) {
  try {
    chat_template_from_name("mistral");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"mistral\""), std::string::npos) << e.what();
  }
  try {
    recognise_chat_template("{{ bos_token }}[INST] {{ messages[0]['content'] }} [/INST]", "tok/tokenizer_config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tok/tokenizer_config.json"), std::string::npos) << e.what();
  }
  // Qwen2.5's ChatML adds a default system prompt; Llama 3.2 writes today's date.
  EXPECT_THROW(recognise_chat_template("{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\nYou are "
                                       "Qwen, created by Alibaba Cloud.' }}{%- endif %}<|im_start|>",
                                       "qwen2.5"),
               Error);
  EXPECT_THROW(recognise_chat_template("<|start_header_id|>{{ strftime_now('%d %b %Y') }}", "llama3.2"), Error);
  EXPECT_THROW(render_chat(ChatTemplate::Qwen3, {{"tool", "{}", ""}}), Error);
}

}  // namespace
