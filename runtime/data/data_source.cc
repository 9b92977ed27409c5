#include "atoll/data_source.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <numeric>

namespace atl {
namespace {

void append_example(const ExampleSet& set, uint32_t i, Batch& b) {
  const auto f = static_cast<size_t>(set.features);
  b.x.insert(b.x.end(), set.x.begin() + static_cast<ptrdiff_t>(i * f),
             set.x.begin() + static_cast<ptrdiff_t>((i + 1) * f));
  b.y.push_back(set.y[i]);
}

void append_window(std::span<const uint8_t> bytes, size_t start, int context, Batch& b) {
  for (size_t k = 0; k <= static_cast<size_t>(context); ++k) b.y.push_back(bytes[start + k]);
}

Batch text_batch_shape(int rows, int context) {
  Batch b;
  b.rows = rows;
  b.y_cols = context + 1;
  b.y.reserve(static_cast<size_t>(rows) * static_cast<size_t>(context + 1));
  b.tokens = static_cast<int64_t>(rows) * context;
  return b;
}

}  // namespace

std::vector<std::vector<uint32_t>> split_indices(size_t n, int shards, uint64_t seed) {
  assert(shards >= 1);
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  Rng rng(seed);
  rng.shuffle(std::span<uint32_t>(perm));
  std::vector<std::vector<uint32_t>> out(static_cast<size_t>(shards));
  const auto s = static_cast<size_t>(shards);
  for (size_t k = 0; k < s; ++k)
    out[k].assign(perm.begin() + static_cast<ptrdiff_t>(k * n / s),
                  perm.begin() + static_cast<ptrdiff_t>((k + 1) * n / s));
  return out;
}

ExampleStream::ExampleStream(std::shared_ptr<const ExampleSet> set, std::vector<uint32_t> indices,
                             uint64_t seed)
    : set_(std::move(set)), order_(std::move(indices)), rng_(seed) {
  assert(!order_.empty());
  rng_.shuffle(std::span<uint32_t>(order_));
}

Batch ExampleStream::next(int batch_size) {
  Batch b;
  b.rows = batch_size;
  b.x_cols = set_->features;
  b.y_cols = 1;
  b.tokens = batch_size;
  b.x.reserve(static_cast<size_t>(batch_size) * static_cast<size_t>(set_->features));
  b.y.reserve(static_cast<size_t>(batch_size));
  for (int k = 0; k < batch_size; ++k) {
    if (cursor_ == order_.size()) {  // new epoch
      rng_.shuffle(std::span<uint32_t>(order_));
      cursor_ = 0;
    }
    append_example(*set_, order_[cursor_++], b);
  }
  return b;
}

TextStream::TextStream(std::shared_ptr<const std::vector<uint8_t>> bytes, int context, uint64_t seed)
    : bytes_(std::move(bytes)), context_(context), rng_(seed) {
  assert(context_ >= 1 && bytes_->size() > static_cast<size_t>(context_) + 1);
}

Batch TextStream::next(int batch_size) {
  Batch b = text_batch_shape(batch_size, context_);
  const uint64_t starts = bytes_->size() - static_cast<size_t>(context_);  // windows of context+1
  for (int k = 0; k < batch_size; ++k) append_window(*bytes_, rng_.below(starts), context_, b);
  return b;
}

std::vector<Batch> example_batches(const ExampleSet& set, int batch_size) {
  std::vector<Batch> out;
  for (size_t begin = 0; begin < set.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(set.size(), begin + static_cast<size_t>(batch_size));
    Batch b;
    b.rows = static_cast<int>(end - begin);
    b.x_cols = set.features;
    b.y_cols = 1;
    b.tokens = b.rows;
    for (size_t i = begin; i < end; ++i) append_example(set, static_cast<uint32_t>(i), b);
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<Batch> text_batches(std::span<const uint8_t> bytes, int context, int batch_size,
                                size_t max_windows) {
  // Tiled windows share one byte, so every byte after the first is predicted
  // exactly once. A cap takes every k-th tile (k fractional), so the windows
  // cover the whole stream, not only its first documents.
  const auto stride = static_cast<size_t>(context);
  const size_t tiles = bytes.size() > stride ? (bytes.size() - 1) / stride : 0;
  const size_t windows = max_windows > 0 ? std::min(tiles, max_windows) : tiles;
  std::vector<Batch> out;
  for (size_t w = 0; w < windows; w += static_cast<size_t>(batch_size)) {
    const auto rows = static_cast<int>(std::min(windows - w, static_cast<size_t>(batch_size)));
    Batch b = text_batch_shape(rows, context);
    for (int r = 0; r < rows; ++r) {
      const size_t tile = (w + static_cast<size_t>(r)) * tiles / windows;
      append_window(bytes, tile * stride, context, b);
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace atl
