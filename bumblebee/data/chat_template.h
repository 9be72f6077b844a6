// Chat templates: HF-style {"role", "content"} messages rendered as a model's chat template would render them,
// split into the text the loss is taken on (assistant turns) and the text it is not.
//
// The templates are written out in C++ rather than run through a Jinja engine: the few families used for
// training are reproduced exactly (tests/fixtures/chat holds HF apply_chat_template's token ids and assistant
// masks for them), and a template of any other family is an error rather than an approximation.
//   chatml    <|im_start|>ROLE\nCONTENT<|im_end|>\n per message (no default system prompt).
//   qwen3     Qwen3's template without tools: ChatML, and the assistant turns after the last user message carry a
//             <think>\nREASONING\n</think>\n\n block (an empty one, "<think>\n\n</think>\n\n", on the last message
//             when it has no reasoning); earlier assistant turns drop their reasoning. Reasoning comes from the
//             message's "reasoning_content" or from a <think>...</think> prefix of its content, as in HF's.
//   llama3    Llama 3: <|begin_of_text|>, then <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
//             per message, CONTENT stripped of surrounding whitespace (Jinja's trim).
//   llama3.1  Llama 3.1: as llama3, and always a system header first: "Cutting Knowledge Date: December 2023\n
//             Today Date: 26 Jul 2024\n\n" followed by the (trimmed) system message if the first message is one.
// Trained text, as HF's {% generation %} tags mark it: an assistant message's rendered body (the think block,
// the content) and its end-of-turn token (<|im_end|> or <|eot_id|>); never the role header or the newline
// after <|im_end|>.
#pragma once

#include <string>
#include <vector>

#include "bumblebee/data/sft_packing.h"
#include "bumblebee/data/tokenizer.h"

namespace bb {

enum class ChatTemplate { ChatML, Qwen3, Llama3, Llama31 };

struct ChatMessage {
  std::string role;                // system | user | assistant
  std::string content;
  std::string reasoning_content;   // assistant only; Qwen3 renders it inside <think>
};

// A run of rendered text and whether the loss is taken on it.
struct ChatSegment {
  std::string text;
  bool trained = false;
};

// "chatml", "qwen3", "llama3", "llama3.1"; anything else is a bb::Error listing the names.
ChatTemplate chat_template_from_name(const std::string& name);
const char* chat_template_name(ChatTemplate t);

// The family of a Jinja chat template (tokenizer_config.json's "chat_template"), recognised by the text that
// decides its output; a template of no known family is a bb::Error naming `source` and what it looks like.
ChatTemplate recognise_chat_template(const std::string& jinja, const std::string& source);

// The "chat_template" of a tokenizer_config.json, recognised.
ChatTemplate chat_template_from_tokenizer_config(const std::string& path);

// The rendered conversation (no generation prompt), adjacent runs of equal `trained` merged.
std::vector<ChatSegment> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages);

// The rendered conversation tokenised run by run (special tokens recognised, no post-processor): each untrained
// run is a turn's prompt, each trained run its response. Runs meet after a special token or after the newline
// that ends a role header, where the byte-level pre-tokenizers split anyway, so the ids equal a tokenisation of
// the whole text (HF's apply_chat_template(tokenize=True)) unless an assistant content starts with a newline in
// chatml/qwen3 (whole-text tokenisation would merge it with the header's newline).
Conversation tokenize_chat(const Tokenizer& tokenizer, ChatTemplate t, const std::vector<ChatMessage>& messages);

}  // namespace bb
