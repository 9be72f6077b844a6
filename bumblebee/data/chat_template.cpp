// Chat templates: recognition of a Jinja template's family and rendering of chatml, qwen3, llama3, llama3.1.
#include "bumblebee/data/chat_template.h"

#include <nlohmann/json.hpp>

#include "bumblebee/core/error.h"
#include "bumblebee/core/input_file.h"

namespace bb {

namespace {

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// Python's str.strip(chars) family, which the templates call with '\n' (and Jinja's trim with whitespace).
std::string lstrip(const std::string& s, const char* chars) {
  const size_t b = s.find_first_not_of(chars);
  return b == std::string::npos ? "" : s.substr(b);
}
std::string rstrip(const std::string& s, const char* chars) {
  const size_t e = s.find_last_not_of(chars);
  return e == std::string::npos ? "" : s.substr(0, e + 1);
}
std::string strip(const std::string& s, const char* chars) { return lstrip(rstrip(s, chars), chars); }
constexpr const char* kWhitespace = " \t\n\r\v\f";

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// Everything before the first `sep` / after the last one (Python's s.split(sep)[0] and [-1]).
std::string before_first(const std::string& s, const std::string& sep) { return s.substr(0, s.find(sep)); }
std::string after_last(const std::string& s, const std::string& sep) {
  const size_t p = s.rfind(sep);
  return p == std::string::npos ? s : s.substr(p + sep.size());
}

class Renderer {
 public:
  void add(const std::string& text, bool trained) {
    if (text.empty()) return;
    if (!out_.empty() && out_.back().trained == trained)
      out_.back().text += text;
    else
      out_.push_back({text, trained});
  }
  std::vector<ChatSegment> take() { return std::move(out_); }

 private:
  std::vector<ChatSegment> out_;
};

void check_roles(const std::vector<ChatMessage>& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    BB_CHECK(r == "system" || r == "user" || r == "assistant", "chat message ", i + 1, " has role \"", r,
             "\"; the chat templates take system, user and assistant messages (tool calls are not supported)");
  }
}

void render_chatml(const std::vector<ChatMessage>& messages, Renderer& out) {
  for (const ChatMessage& m : messages) {
    out.add("<|im_start|>" + m.role + "\n", false);
    const bool trained = m.role == "assistant";
    out.add(m.content + "<|im_end|>", trained);
    out.add("\n", false);
  }
}

// Qwen3's template (tools left out), statement for statement.
void render_qwen3(const std::vector<ChatMessage>& messages, Renderer& out) {
  const size_t n = messages.size();
  if (n > 0 && messages[0].role == "system") out.add("<|im_start|>system\n" + messages[0].content + "<|im_end|>\n", false);
  // The last user message that is not a tool response: assistant turns after it keep their reasoning.
  size_t last_query = n - 1;
  for (size_t k = n; k-- > 0;) {
    const ChatMessage& m = messages[k];
    if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const ChatMessage& m = messages[i];
    std::string content = m.content;
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      out.add("<|im_start|>" + m.role + "\n" + content + "<|im_end|>\n", false);
    } else if (m.role == "assistant") {
      std::string reasoning = m.reasoning_content;
      if (reasoning.empty() && contains(content, "</think>")) {
        reasoning = lstrip(after_last(rstrip(before_first(content, "</think>"), "\n"), "<think>"), "\n");
        content = lstrip(after_last(content, "</think>"), "\n");
      }
      out.add("<|im_start|>assistant\n", false);
      const bool last = i + 1 == n;
      if (i > last_query && (last || !reasoning.empty()))
        out.add("<think>\n" + strip(reasoning, "\n") + "\n</think>\n\n" + lstrip(content, "\n"), true);
      else
        out.add(content, true);
      out.add("<|im_end|>", true);
      out.add("\n", false);
    }
  }
}

void render_llama3(const std::vector<ChatMessage>& messages, bool default_system, Renderer& out) {
  out.add("<|begin_of_text|>", false);
  size_t first = 0;
  if (default_system) {
    std::string system;
    if (!messages.empty() && messages[0].role == "system") {
      system = strip(messages[0].content, kWhitespace);
      first = 1;
    }
    out.add("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\n" + system + "<|eot_id|>", false);
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    out.add("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n", false);
    out.add(strip(m.content, kWhitespace) + "<|eot_id|>", m.role == "assistant");
  }
}

}  // namespace

ChatTemplate chat_template_from_name(const std::string& name) {
  if (name == "chatml") return ChatTemplate::ChatML;
  if (name == "qwen3") return ChatTemplate::Qwen3;
  if (name == "llama3") return ChatTemplate::Llama3;
  if (name == "llama3.1") return ChatTemplate::Llama31;
  BB_FAIL("unknown chat template \"", name, "\"; known: chatml, qwen3, llama3, llama3.1");
}

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::ChatML: return "chatml";
    case ChatTemplate::Qwen3: return "qwen3";
    case ChatTemplate::Llama3: return "llama3";
    case ChatTemplate::Llama31: return "llama3.1";
  }
  return "?";
}

ChatTemplate recognise_chat_template(const std::string& jinja, const std::string& source) {
  if (contains(jinja, "<|start_header_id|>")) {
    // Llama 3.2 and later write today's date (strftime_now) into the system header: not reproducible.
    BB_CHECK(!contains(jinja, "strftime_now"), "chat template of ", source,
             " writes today's date into the system header (Llama 3.2 and later); set data.chat_template=llama3.1 "
             "for Llama 3.1's fixed \"Today Date: 26 Jul 2024\" or data.chat_template=llama3 for none");
    if (contains(jinja, "Cutting Knowledge Date: December 2023") && contains(jinja, "26 Jul 2024"))
      return ChatTemplate::Llama31;
    if (contains(jinja, "message['content'] | trim + '<|eot_id|>'") && !contains(jinja, "Cutting Knowledge"))
      return ChatTemplate::Llama3;
    BB_FAIL("chat template of ", source, " uses Llama 3 headers but is neither Llama 3's nor Llama 3.1's; set "
            "data.chat_template=llama3|llama3.1 if one of them is meant");
  }
  if (contains(jinja, "<|im_start|>")) {
    if (contains(jinja, "last_query_index") && contains(jinja, "reasoning_content") && contains(jinja, "<think>"))
      return ChatTemplate::Qwen3;
    // A plain ChatML template: every message the same way, no default system prompt (Qwen2.5 adds one).
    if (!contains(jinja, "You are") && !contains(jinja, "<think>") && !contains(jinja, "tools"))
      return ChatTemplate::ChatML;
    BB_FAIL("chat template of ", source, " is ChatML-like but neither Qwen3's nor plain ChatML (a default system "
            "prompt, tools or reasoning of another model); set data.chat_template=chatml|qwen3 if one of them is "
            "meant");
  }
  BB_FAIL("chat template of ", source, " is of no known family (chatml, qwen3, llama3, llama3.1); it begins \"",
          jinja.substr(0, 80), "\"; set data.chat_template");
}

ChatTemplate chat_template_from_tokenizer_config(const std::string& path) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(read_input_file(path, "tokenizer_config.json"));
  } catch (const nlohmann::json::exception& e) {
    BB_FAIL(path, ": malformed JSON: ", e.what());
  }
  BB_CHECK(config.is_object() && config.contains("chat_template"), path,
           " has no \"chat_template\"; set data.chat_template=chatml|qwen3|llama3|llama3.1");
  const nlohmann::json& t = config["chat_template"];
  BB_CHECK(t.is_string(), path, ": \"chat_template\" is not a single template string (named templates are not "
           "supported); set data.chat_template");
  return recognise_chat_template(t.get<std::string>(), path);
}

std::vector<ChatSegment> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages) {
  check_roles(messages);
  Renderer out;
  switch (t) {
    case ChatTemplate::ChatML: render_chatml(messages, out); break;
    case ChatTemplate::Qwen3: render_qwen3(messages, out); break;
    case ChatTemplate::Llama3: render_llama3(messages, false, out); break;
    case ChatTemplate::Llama31: render_llama3(messages, true, out); break;
  }
  return out.take();
}

Conversation tokenize_chat(const Tokenizer& tokenizer, ChatTemplate t, const std::vector<ChatMessage>& messages) {
  Conversation out;
  for (const ChatSegment& s : render_chat(t, messages)) {
    const std::vector<int32_t> ids = tokenizer.encode(s.text, /*add_special_tokens=*/false);
    if (!s.trained || out.empty()) out.emplace_back();
    std::vector<int64_t>& dst = s.trained ? out.back().response : out.back().prompt;
    dst.insert(dst.end(), ids.begin(), ids.end());
  }
  return out;
}

}  // namespace bb
