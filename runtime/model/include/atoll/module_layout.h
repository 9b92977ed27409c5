// A PyTorch module's parameters as an atoll layout.
//
// One rule, shared by every place a module's layout is made (a TorchScript
// file, an external model file, a Python learner's named_parameters()), so
// that the same module gives the same fingerprint everywhere:
//   - tensors in the module's order, each under its name (a tied weight once,
//     by its first name: the caller dedups);
//   - row-major, any rank: rows = dims[0], cols = the product of the rest; a
//     scalar (rank 0) is one value, dims [1];
//   - rank >= 2 decays, lower ranks (biases, norms) don't;
//   - names matching a glob of `avg` (fnmatch) are merged by weighted mean
//     (AVG), the others by RDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "atoll/param_layout.h"
#include "atoll/status.h"

namespace atl {

struct NamedShape {
  std::string name;
  std::vector<int64_t> dims;  // row-major; empty: a scalar
  friend bool operator==(const NamedShape&, const NamedShape&) = default;
};

// Fails, naming the tensor, on an empty or repeated name, a dimension < 1,
// or a tensor of more than 2^31 - 1 values.
Result<ParamLayout> module_layout(const std::vector<NamedShape>& tensors, const std::vector<std::string>& avg);

// The tensors of a layout made by module_layout() (names and dims), in order.
std::vector<NamedShape> shapes_of(const ParamLayout& layout);

// "h.0.attn.qkv.weight [384, 128]"
std::string describe_shape(const NamedShape& tensor);

// Where two module layouts differ, in a few lines: the counts, then the
// first tensors that differ by name or shape ("" when they are equal).
std::string layout_difference(const std::vector<NamedShape>& ours, const std::vector<NamedShape>& theirs,
                              const std::string& our_name, const std::string& their_name);

}  // namespace atl
