// ExampleSet: labeled examples for a classifier, in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace atl {

struct ExampleSet {
  int features = 0;        // floats per example
  int classes = 0;         // labels are in [0, classes)
  std::vector<float> x;    // size() * features, one example after the other
  std::vector<int32_t> y;  // size() labels

  size_t size() const { return y.size(); }
};

}  // namespace atl
