#include "atoll/param_layout.h"

#include <cassert>

#include "atoll/fnv1a.h"

namespace atl {

int ParamLayout::add(std::string name, int rows, int cols, TensorRole role, bool decay) {
  assert(rows > 0 && cols > 0 && find(name) < 0);
  TensorSpec t{std::move(name), rows, cols, role, decay, size_, {}};
  size_ += t.size();
  tensors_.push_back(std::move(t));
  return count() - 1;
}

int ParamLayout::add(std::string name, std::vector<int64_t> dims, TensorRole role, bool decay) {
  assert(!dims.empty());
  int64_t cols = 1;
  for (size_t i = 1; i < dims.size(); ++i) cols *= dims[i];
  const int i = add(std::move(name), static_cast<int>(dims[0]), static_cast<int>(cols), role, decay);
  tensors_.back().dims = std::move(dims);
  return i;
}

int ParamLayout::find(std::string_view name) const {
  for (int i = 0; i < count(); ++i)
    if (tensors_[static_cast<size_t>(i)].name == name) return i;
  return -1;
}

uint64_t ParamLayout::fingerprint() const {
  Fnv1a f;
  for (const auto& t : tensors_) {
    f.bytes(t.name.data(), t.name.size());
    f.value<uint8_t>(0);  // terminator: "ab"+"c" differs from "a"+"bc"
    f.value<int32_t>(t.rows);
    f.value<int32_t>(t.cols);
    f.value<uint8_t>(static_cast<uint8_t>(t.role));
    f.value<uint8_t>(t.decay ? 1 : 0);
    // Only tensors with dims hash them, so atoll's own layouts keep the
    // fingerprints their checkpoints were written with.
    for (int64_t d : t.dims) f.value<int64_t>(d);
  }
  return f.h;
}

}  // namespace atl
