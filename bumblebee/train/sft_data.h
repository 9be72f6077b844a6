// SFT data: conversations from a JSONL corpus, ChatML-formatted, packed into rows of data.seq_len tokens.
//
// data.sft_format says where conversations come from:
//   paragraphs       each paragraph (text between blank lines) of each document's
//                    data.jsonl_key text is one conversation: prompt = its first
//                    sentence, response = the rest;
//   prompt_response  each line holds "prompt" and "response" strings;
//   messages         each line holds HF's chat format, {"messages": [{"role": "system"|"user"|"assistant",
//                    "content": ...}, ...]}, rendered by data.chat_template (or the family recognised from the
//                    tokenizer_config.json beside data.tokenizer; bumblebee/data/chat_template.h) with the loss on
//                    the assistant turns and their end-of-turn tokens only.
// A paragraphs or prompt_response turn is written in the ChatML template of Qwen:
//   prompt   = "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n"
//   response = response + "<|im_end|>\n"          (only these tokens are trained on)
// Documents (lines) are split into train and valid by data.split before any
// packing, so no held-out text leaks into training. pack_conversations packs
// each split into rows of at most seq_len tokens; the train rows are reshuffled
// every epoch by train.seed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bumblebee/data/sft_packing.h"
#include "bumblebee/data/tokenizer.h"
#include "bumblebee/train/train_data.h"

namespace bb::train {

// A paragraph as (first sentence, rest), both trimmed. The first sentence ends
// at the first '.', '?' or '!' followed by whitespace after at least
// kMinPromptChars characters; without one, or with nothing after it, both are empty.
inline constexpr size_t kMinPromptChars = 16;
std::pair<std::string, std::string> split_first_sentence(const std::string& paragraph);

// The (prompt, response) pairs of a document's paragraphs, skipping paragraphs without a split.
std::vector<std::pair<std::string, std::string>> paragraph_pairs(const std::string& text);

// One ChatML turn, tokenised (special tokens in the template are recognised).
ConversationTurn chatml_turn(const Tokenizer& tokenizer, const std::string& prompt, const std::string& response);

std::unique_ptr<TrainData> make_sft_data(const Tokenizer& tokenizer, const DataRecipe& data,
                                         const TrainRecipe& train, int64_t vocab_size, DataRank dp);

}  // namespace bb::train
