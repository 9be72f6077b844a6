// make_train_data: tokenises a JSONL corpus when the recipe gives one, then builds pretrain or SFT data.
#include "bumblebee/train/train_data.h"

#include <filesystem>
#include <sstream>

#include "bumblebee/core/error.h"
#include "bumblebee/data/preprocess.h"
#include "bumblebee/data/tokenizer.h"
#include "bumblebee/distributed/world.h"
#include "bumblebee/train/pretrain_data.h"
#include "bumblebee/train/sft_data.h"

namespace bb::train {

namespace {

// data.jsonl -> OUT/data/<name>.bin/.idx, written by world rank 0 only.
std::string tokenise_jsonl(const Tokenizer& tokenizer, const DataRecipe& data, const std::string& output_dir,
                           const std::function<void(const std::string&)>& log) {
  const std::string dir = output_dir + "/data";
  const std::string prefix = dir + "/" + std::filesystem::path(data.jsonl).stem().string();
  dist::World& world = dist::World::instance();
  if (world.rank() == 0) {
    std::filesystem::create_directories(dir);
    PreprocessOptions opt;
    opt.input = data.jsonl;
    opt.output_prefix = prefix;
    opt.key = data.jsonl_key;
    const PreprocessStats s = preprocess_jsonl(tokenizer, opt, {}, {});
    std::ostringstream line;
    line << "tokenised " << data.jsonl << " -> " << prefix << ".bin/.idx: " << s.documents << " documents, "
         << s.tokens << " tokens (" << s.seconds << " s)";
    log(line.str());
  }
  world.comm().barrier();
  return prefix;
}

}  // namespace

std::unique_ptr<TrainData> make_train_data(const Recipe& recipe, const std::string& output_dir, int64_t vocab_size,
                                           DataRank dp, const std::function<void(const std::string&)>& log) {
  const DataRecipe& data = recipe.data;
  std::unique_ptr<TrainData> out;
  if (!data.jsonl.empty()) {
    const Tokenizer tokenizer = Tokenizer::from_file(data.tokenizer);
    BB_CHECK(tokenizer.vocab_size() <= vocab_size, "tokenizer ", data.tokenizer, " has ", tokenizer.vocab_size(),
             " ids but the model's vocabulary holds ", vocab_size);
    if (data.kind == "sft") {
      out = make_sft_data(tokenizer, data, recipe.train, vocab_size, dp);
    } else {
      const std::string prefix = tokenise_jsonl(tokenizer, data, output_dir, log);
      out = make_pretrain_data({prefix}, {}, data, recipe.train, vocab_size, dp);
    }
  } else {
    out = make_pretrain_data(data.prefixes, data.blend, data, recipe.train, vocab_size, dp);
  }
  log(out->description());
  return out;
}

}  // namespace bb::train
