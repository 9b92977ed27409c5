// ParamLayout: a model's parameters as named tensors in one contiguous buffer.
//
// Every replica (learner, syncer, checkpoint) stores parameters as one flat
// float buffer; a tensor is a named view (offset, rows x cols, column-major).
// Gradients and optimizer moments share the layout, so optimizers and codecs
// work on flat spans. The layout is fixed when the model is built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace atl {

// What a tensor is for. Fragments holding an embedding or an output head are
// merged by weighted mean (AVG); the others by RDA (see merge.h).
enum class TensorRole : uint8_t { kBody = 0, kEmbedding = 1, kHead = 2 };

struct TensorSpec {
  std::string name;    // unique within the layout, e.g. "layer0.weight"
  int rows = 0;        // a vector is (n, 1)
  int cols = 0;
  TensorRole role = TensorRole::kBody;
  bool decay = true;   // AdamW weight decay applies (weights yes, biases and norms no)
  size_t offset = 0;   // in floats from the start of the buffer
  // The model's own shape, when it has one beyond rows x cols (a TorchScript
  // tensor: row-major, any rank, rows = dims[0], cols = the product of the
  // rest). Empty for atoll's own models.
  std::vector<int64_t> dims;

  size_t size() const { return static_cast<size_t>(rows) * static_cast<size_t>(cols); }
};

class ParamLayout {
 public:
  // Appends a tensor after the last one and returns its index.
  // REQUIRES: name not already present, rows > 0, cols > 0.
  int add(std::string name, int rows, int cols, TensorRole role, bool decay);
  // The same for a tensor of any rank (row-major `dims`, each > 0).
  int add(std::string name, std::vector<int64_t> dims, TensorRole role, bool decay);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const TensorSpec& tensor(int i) const { return tensors_[static_cast<size_t>(i)]; }
  int count() const { return static_cast<int>(tensors_.size()); }
  // Index of the tensor called `name`, or -1.
  int find(std::string_view name) const;
  // Total number of floats.
  size_t size() const { return size_; }

  // FNV-1a hash of every tensor's name, shape (with dims when set), role and
  // decay flag, in order.
  // Two replicas can exchange parameters only if their fingerprints match.
  uint64_t fingerprint() const;

 private:
  std::vector<TensorSpec> tensors_;
  size_t size_ = 0;
};

}  // namespace atl
