// Quick start: train a model through the runtime API (the README's C++ example).
//
//   build/bin/quickstart [HF_DIR]
//
// Builds the model in HF_DIR (default: the tiny Qwen3 config shipped in
// configs/, randomly initialised), trains it for a few AdamW steps on a fixed
// packed batch of two sequences and prints the loss, which must fall.
#include <cstdio>

#include "bumblebee/runtime/runtime.h"

int main(int argc, char** argv) {
  using namespace bb;
  RuntimeConfig cfg;
  cfg.backend = "bb";
  cfg.hf_path = argc > 1 ? argv[1] : BB_SOURCE_DIR "/configs/qwen3-tiny";
  cfg.backend_cfg.model_name = "auto";           // from config.json's model_type
  cfg.backend_cfg.load_hf_weights = argc > 1;    // the shipped config has no weights: random init
  cfg.backend_cfg.optimizer.lr = 2e-3;
  cfg.backend_cfg.parallel.tp = 1;

  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();

  PackedBatch data;   // two sequences, packed (THD), no padding
  for (int64_t t = 0; t < 48; ++t) data.input_ids.push_back((t * 7) % 50);
  for (int64_t t = 0; t < 32; ++t) data.input_ids.push_back((t * 3) % 40);
  data.seq_lens = {48, 32};

  double first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    auto mode = rt->train_mode(h);
    rt->zero_grad(h);
    ForwardResult result = rt->forward_backward(h, data, /*loss_fn=*/{}, /*num_microbatches=*/2);
    OptimizerStepResult s = rt->optimizer_step(h);
    rt->lr_scheduler_step(h);
    std::printf("step %d loss %.4f grad_norm %.4f update %s\n", step, result.loss, s.grad_norm,
                s.update_successful ? "ok" : "skipped");
    (step == 0 ? first : last) = result.loss;
  }
  if (!(last < first)) {
    std::fprintf(stderr, "loss did not fall: %.4f -> %.4f\n", first, last);
    return 1;
  }
  return 0;
}
