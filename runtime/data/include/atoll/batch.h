// Batch: a set of examples handed to a model in one step.
#pragma once

#include <cstdint>
#include <vector>

namespace atl {

// Two shapes share this struct:
//   classifier: x is rows x x_cols floats (one example per row, row-major),
//               y holds rows labels (y_cols = 1);
//   byte LM:    y is rows x y_cols tokens (context + 1 per row, row-major), x empty.
// `tokens` is what the batch counts for token weights and throughput: one per
// example for a classifier, rows * context for a language model.
struct Batch {
  int rows = 0;
  int x_cols = 0;
  std::vector<float> x;
  int y_cols = 0;
  std::vector<int32_t> y;
  int64_t tokens = 0;
};

}  // namespace atl
