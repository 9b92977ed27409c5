// Small helpers shared by the test suites.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include "atoll/batch.h"
#include "atoll/codec.h"
#include "atoll/log.h"
#include "atoll/messages.h"
#include "atoll/rng.h"
#include "atoll/syncer_core.h"
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

// tiny_mlp_topology() with 64 examples and fp32 on the wire: pushes and
// broadcasts carry exact values, for protocol tests that compare them.
inline Topology exact_wire_topology() {
  Topology t = tiny_mlp_topology();
  t.data.examples = 64;
  t.outer.push_codec = Codec::kFp32;
  t.outer.broadcast_codec = Codec::kFp32;
  return t;
}

// Virtual time for protocol tests (SyncerCore takes the time as an
// argument): a fixed start, and `seconds` after it.
inline constexpr std::chrono::steady_clock::time_point kStart{};
inline std::chrono::steady_clock::time_point at(double seconds) {
  return kStart + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

// A SyncerCore driven message by message in virtual time (at(t)), and what
// its learners would say: the fixture of the syncer's protocol tests. The
// topology gets H = 4 (outer.sync_every) and fp32 codecs both ways, so that
// a test's numbers come back exact. Learner m of process p registers from
// actor p * 100 + m.
struct SyncerCoreDriver {
  Topology topology;  // as given, with H = 4 and the fp32 codecs: what a restarted core is made from
  std::unique_ptr<SyncerCore> core;
  uint64_t fingerprint = 0;
  size_t n = 0;  // parameters

  explicit SyncerCoreDriver(Topology t) : topology(std::move(t)) {
    topology.outer.sync_every = 4;
    topology.outer.push_codec = Codec::kFp32;
    topology.outer.broadcast_codec = Codec::kFp32;
    auto created = SyncerCore::create(topology, kStart);
    BOOST_REQUIRE_MESSAGE(created.ok(), created.status().to_string());
    core = std::move(*created);
    fingerprint = core->layout().fingerprint();
    n = core->layout().size();
  }

  Register reg(uint32_t m, uint64_t incarnation = 1) const { return Register{m, incarnation, fingerprint, "", {}}; }
  static Sender sender(uint64_t process, uint32_t m) { return Sender{process, process * 100 + m}; }

  // Learner m registers at t: the verdict, and the effects in `out` if given.
  Admission join(uint32_t m, double t = 0.0, uint64_t process = 1, uint64_t incarnation = 1,
                 SyncerEffects* out = nullptr) {
    SyncerEffects fx;
    const Admission a = core->on_register(reg(m, incarnation), sender(process, m), at(t), fx);
    if (out) *out = std::move(fx);
    return a;
  }
  // The same, required to be accepted at once; the effects.
  SyncerEffects must_join(uint32_t m, double t = 0.0, uint64_t incarnation = 1, uint64_t process = 1) {
    SyncerEffects fx;
    BOOST_REQUIRE(join(m, t, process, incarnation, &fx).accepted());
    return fx;
  }
  // A learner without an id claims an open slot and registers in it: the slot.
  uint32_t claim_and_join(double t, uint64_t process = 1, SyncerEffects* out = nullptr) {
    SyncerEffects fx;
    const Admission c = core->claim(process, at(t), fx);
    BOOST_REQUIRE(c.accepted());
    BOOST_REQUIRE(join(c.learner, t, process, 1, out).accepted());
    return c.learner;
  }

  // Learner m reports `steps` steps since fragment 0's current version.
  SyncerEffects progress(uint32_t m, uint64_t steps, double t, double step_seconds = 0.1, uint64_t incarnation = 1) {
    SyncerEffects fx;
    core->on_progress(Progress{m, incarnation, steps, steps * 8, step_seconds, {{core->version(0), steps}}, 1.0f},
                      at(t), fx);
    return fx;
  }
  // Learner m answers `round` with every value of its delta `delta`, from
  // fragment 0's current version.
  SyncerEffects push(uint32_t m, uint64_t round, uint64_t steps, float delta, double t, uint64_t incarnation = 1) {
    return push_from_base(m, round, core->version(0), steps, delta, t, incarnation);
  }
  // The same from base version `base`.
  SyncerEffects push_from_base(uint32_t m, uint64_t round, uint64_t base, uint64_t steps, float delta, double t,
                               uint64_t incarnation = 1) {
    SyncerEffects fx;
    Push p{m, incarnation, 0, round, base, steps, steps * 8, 0.1 * double(steps),
           encode_payload(Codec::kFp32, 0, std::vector<float>(n, delta))};
    // The progress since its previous push (steps (since, through] of its own).
    p.since = pushed_through[m];
    p.through = pushed_through[m] += steps;
    core->on_push(p, at(t), fx);
    return fx;
  }
  std::map<uint32_t, uint64_t> pushed_through;  // by learner
  SyncerEffects leave(uint32_t m, double t, uint64_t incarnation = 1) {
    SyncerEffects fx;
    core->on_leave(Leave{m, incarnation, "asked to stop"}, at(t), fx);
    return fx;
  }
  const LearnerRecord& rec(uint32_t m) const { return core->learners()[m]; }
};

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

// The log's lines while it lives (atoll/log.h's sink), for tests that check
// what a component says; the default destination comes back when it goes.
class LogCapture {
 public:
  LogCapture() {
    set_log_sink([this](LogLevel, const std::string& text) {
      std::lock_guard lock(mu_);
      lines_.push_back(text);
    });
  }
  ~LogCapture() { set_log_sink(nullptr); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  // How many lines so far contain `text`.
  size_t count(const std::string& text) const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& l : lines_) n += l.find(text) != std::string::npos;
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

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
