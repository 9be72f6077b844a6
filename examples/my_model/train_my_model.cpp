// Trains the out-of-tree "my_llama" model from its plugin: name the plugin
// in the config, then use the runtime as usual.
//
//   train_my_model HF_DIR PLUGIN    (config.json with "model_type": "my_llama";
//                                    PLUGIN: libmy_model.so)
#include <cstdio>

#include "bumblebee/runtime/runtime.h"
#include "bumblebee/version.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: train_my_model HF_DIR PLUGIN.so\n");
    return 2;
  }
  bb::RuntimeConfig cfg;
  cfg.hf_path = argv[1];
  cfg.plugins = {argv[2]};   // the key plugin=PATH in the tools
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
  std::printf("my_llama: loss %.4f grad_norm %.4f layers %d (libbumblebee %s)\n", r.loss, s.grad_norm,
              h.config()["num_layers"].get<int>(), bb::library_version());
  return s.update_successful ? 0 : 1;
}
