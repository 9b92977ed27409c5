// Transformer: a decoder-only, byte-level language model (GPT-2 style).
//
// Vocabulary of 256 bytes, learned positions, pre-LayerNorm blocks of causal
// multi-head attention and a GELU MLP, a final LayerNorm and an output head.
// Tensors (llm.c naming): wte (C, 256) and wpe (C, T) are the embedding
// (merged AVG), head (256, C) is the output head (merged AVG); per block h{i}:
// ln1.w/b, attn.qkv.weight (3C, C)/bias, attn.proj.weight (C, C)/bias,
// ln2.w/b, mlp.fc.weight (4C, C)/bias, mlp.proj.weight (C, 4C)/bias; then
// lnf.w/b. 2-D weights decay; biases and norms don't.
//
// A batch is rows x (T+1) bytes: each row's first T predict its last T. Each
// op's backward sits next to its forward in layers.h.
#pragma once

#include <string>
#include <string_view>

#include "atoll/model.h"

namespace atl {

struct TransformerConfig {
  int layers = 4;
  int width = 128;   // C
  int heads = 4;     // C must be divisible by heads
  int context = 128; // T
  int vocab = 256;
};

class Transformer final : public Model {
 public:
  explicit Transformer(TransformerConfig config);
  ~Transformer() override;

  std::string describe() const override;
  const ParamLayout& layout() const override { return layout_; }
  void init(std::span<float> params, uint64_t seed) const override;
  float forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads) override;
  EvalSums evaluate(std::span<const float> params, const Batch& batch) override;

  // Continues `prompt` by `bytes` bytes sampled at `temperature` (> 0),
  // reproducibly for a seed.
  std::string sample(std::span<const float> params, std::string_view prompt, int bytes, double temperature,
                     uint64_t seed);

  // FLOPs of one forward + backward pass over `tokens` predicted bytes (for
  // efficiency figures): 6 per parameter use and the attention products.
  double train_flops(int64_t rows) const;

  const TransformerConfig& config() const { return config_; }

 private:
  struct Workspace;
  // Runs B sequences of T (<= context) tokens; returns the summed loss when
  // targets are given (else 0). Leaves every activation in ws_.
  double forward(std::span<const float> params, std::span<const int32_t> tokens, std::span<const int32_t> targets,
                 int B, int T);

  TransformerConfig config_;
  ParamLayout layout_;
  struct Block {
    int ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  std::vector<Block> blocks_;
  int wte_, wpe_, lnfw_, lnfb_, head_;
  std::unique_ptr<Workspace> ws_;
};

}  // namespace atl
