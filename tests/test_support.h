// Small helpers shared by the test suites.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "atoll/batch.h"
#include "atoll/rng.h"
#include "atoll/topology.h"

namespace atl::testing {

// Where scripts/setup put the data sets: $ATOLL_DATA_DIR, else the build's default.
inline std::string data_dir() {
  const char* env = std::getenv("ATOLL_DATA_DIR");
  return env && *env ? env : ATOLL_DATA_DIR;
}

// An MLP 4-5-3 on synthetic clusters, two learners of speed 1 and batch 8,
// one fragment, no checkpoints: the smallest topology a syncer runs.
inline Topology tiny_mlp_topology(Mode mode = Mode::kDecoupled) {
  Topology t;
  t.mode = mode;
  t.model.kind = ModelKind::kMlp;
  t.data.kind = DataKind::kSynthetic;
  t.data.features = 4;
  t.data.classes = 3;
  t.model.hidden = {5};
  t.learners = {{1.0, 8}, {1.0, 8}};
  t.outer.fragments = 1;
  t.checkpoint.dir = "";
  return t;
}

// Virtual time for protocol tests (SyncerCore takes the time as an
// argument): a fixed start, and `seconds` after it.
inline constexpr std::chrono::steady_clock::time_point kStart{};
inline std::chrono::steady_clock::time_point at(double seconds) {
  return kStart + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

// The committed text fixture: the first State of the Union address, 1790.
inline std::string sotu_excerpt() {
  std::ifstream in(std::string(ATOLL_SOURCE_DIR) + "/tests/fixtures/sotu_1790_excerpt.txt");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A language-model batch of `rows` windows of T + 1 bytes of `text`, row r
// starting at offset + 7 r (wrapping around).
inline Batch text_batch(const std::string& text, int rows, int T, size_t offset) {
  Batch b;
  b.rows = rows;
  b.y_cols = T + 1;
  b.tokens = int64_t{rows} * T;
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k <= T; ++k) b.y.push_back(static_cast<uint8_t>(text[(offset + size_t(r * 7 + k)) % text.size()]));
  return b;
}

// Ends the test executable with CTest's "skipped" code (77) and the reason.
// Only for a missing prerequisite, never for a failed expectation.
[[noreturn]] inline void skip(const std::string& reason) {
  std::cout << "SKIPPED: " << reason << std::endl;
  std::fflush(nullptr);
  std::_Exit(77);
}

// A fresh temporary folder, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("atoll-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::vector<float> random_vector(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

}  // namespace atl::testing
