// Trains the out-of-tree "my_llama" model: register, then use the runtime as usual.
//
//   build/bin/train_my_model HF_DIR    (config.json with "model_type": "my_llama")
#include <cstdio>

#include "bumblebee/runtime/runtime.h"
#include "examples/my_model/my_model.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_my_model HF_DIR\n");
    return 2;
  }
  my_repo::register_my_llama();
  bb::RuntimeConfig cfg;
  cfg.hf_path = argv[1];
  cfg.backend_cfg.model_name = "my_llama";
  cfg.backend_cfg.load_hf_weights = false;
  auto rt = bb::create_runtime(cfg);
  bb::ModelHandle h = rt->build_model();
  bb::PackedBatch data;
  for (int64_t t = 0; t < 16; ++t) data.input_ids.push_back(t % 11);
  data.seq_lens = {16};
  auto mode = rt->train_mode(h);
  rt->zero_grad(h);
  bb::ForwardResult r = rt->forward_backward(h, data);
  bb::OptimizerStepResult s = rt->optimizer_step(h);
  std::printf("my_llama: loss %.4f grad_norm %.4f layers %d\n", r.loss, s.grad_norm,
              h.config()["num_layers"].get<int>());
  return s.update_successful ? 0 : 1;
}
