// Data sources: endless streams of training batches, one per learner, and
// fixed evaluation batches.
//
// A learner's stream reads only its own shard, and is deterministic in its
// seed: the same shard and seed give the same batches, run after run.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "atoll/batch.h"
#include "atoll/example_set.h"
#include "atoll/rng.h"

namespace atl {

class DataSource {
 public:
  virtual ~DataSource() = default;
  // The next training batch of `batch_size` examples (or windows). REQUIRES: batch_size > 0.
  virtual Batch next(int batch_size) = 0;
};

// Splits [0, n) into `shards` disjoint sets of near-equal size (a seeded
// permutation cut in order). REQUIRES: shards >= 1.
std::vector<std::vector<uint32_t>> split_indices(size_t n, int shards, uint64_t seed);

// The examples of one shard, in a seeded random order reshuffled every epoch.
class ExampleStream final : public DataSource {
 public:
  // REQUIRES: indices non-empty, each < set->size().
  ExampleStream(std::shared_ptr<const ExampleSet> set, std::vector<uint32_t> indices, uint64_t seed);
  Batch next(int batch_size) override;

 private:
  std::shared_ptr<const ExampleSet> set_;
  std::vector<uint32_t> order_;
  size_t cursor_ = 0;
  Rng rng_;
};

// Windows of context + 1 bytes at seeded random positions of one byte stream;
// a window's first `context` bytes predict its last `context` bytes.
class TextStream final : public DataSource {
 public:
  // REQUIRES: bytes->size() > context + 1, context >= 1.
  TextStream(std::shared_ptr<const std::vector<uint8_t>> bytes, int context, uint64_t seed);
  Batch next(int batch_size) override;

 private:
  std::shared_ptr<const std::vector<uint8_t>> bytes_;
  int context_;
  Rng rng_;
};

// Every example once, in order, in batches of batch_size (the last may be smaller).
std::vector<Batch> example_batches(const ExampleSet& set, int batch_size);

// Windows of context + 1 bytes tiling `bytes`, each starting where the
// previous one's predictions end (so every byte after the first is predicted
// once), in batches of batch_size. With max_windows (0: every tile) below the
// number of tiles, that many tiles evenly spread over the whole of `bytes`.
std::vector<Batch> text_batches(std::span<const uint8_t> bytes, int context, int batch_size,
                                size_t max_windows = 0);

}  // namespace atl
