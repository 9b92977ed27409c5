// Checkpoints: a file is either complete and verified or ignored, and a bad
// newest file never hides the previous good one.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <limits>

#include <unistd.h>

#include "atoll/checkpoint.h"
#include "atoll/crc32c.h"
#include "atoll/file.h"
#include "atoll/fragments.h"
#include "atoll/syncer_core.h"
#include "test_support.h"

namespace atl {
namespace {

CheckpointState state_of(uint64_t rounds) {
  CheckpointState s;
  s.fingerprint = 0xfeedULL;
  s.plan_fingerprint = 0xf00dULL;
  s.created_unix_ms = 1700000000000 + static_cast<int64_t>(rounds);
  s.rounds = rounds;
  s.fragments = {{0, rounds, testing::random_vector(100, rounds), testing::random_vector(100, rounds + 7)},
                 {1, rounds + 1, testing::random_vector(33, rounds + 1), std::vector<float>(33, 0.0f)}};
  s.learners = {{0, 1, 0, 0, 12, 768, true, 1}, {1, 3, 40, 2560, 7, 448, false, 0x8000000000000042ULL}};
  s.optimizer = CheckpointState::OptimizerRecord{static_cast<int64_t>(rounds) * 10, testing::random_vector(133, rounds + 3),
                                                 testing::random_vector(133, rounds + 4)};
  for (float& v : s.optimizer->v) v = v * v;
  s.figures = {1, 2, 3, static_cast<uint8_t>(rounds), 5, 6, 7, 8, 9};  // the syncer's; the store keeps them as they are
  return s;
}

std::vector<std::string> load_warnings(const CheckpointStore& store, std::optional<CheckpointState>& out) {
  std::vector<std::string> warnings;
  auto r = store.load_latest(0xfeedULL, [&](const std::string& w) { warnings.push_back(w); });
  BOOST_REQUIRE(r.ok());
  out = *r;
  return warnings;
}

std::unique_ptr<CheckpointStore> open_store(const std::string& dir, int keep) {
  auto store = CheckpointStore::open(dir, keep);
  BOOST_REQUIRE_MESSAGE(store.ok(), store.status().to_string());
  return std::move(*store);
}

void overwrite(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_test)

BOOST_AUTO_TEST_CASE(crc32c_matches_the_standard_check_value) {
  const std::string s = "123456789";
  BOOST_CHECK_EQUAL(crc32c({reinterpret_cast<const uint8_t*>(s.data()), s.size()}), 0xe3069283u);
  // Continuing a checksum equals computing it in one go.
  const auto a = crc32c({reinterpret_cast<const uint8_t*>(s.data()), 4});
  BOOST_CHECK_EQUAL(crc32c({reinterpret_cast<const uint8_t*>(s.data()) + 4, 5}, a), 0xe3069283u);
}

BOOST_AUTO_TEST_CASE(encode_then_decode_gives_the_same_state) {
  const auto s = state_of(42);
  auto back = decode_checkpoint(encode_checkpoint(s));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK(*back == s);
}

BOOST_AUTO_TEST_CASE(every_damaged_file_is_refused_with_the_reason) {
  const auto good = encode_checkpoint(state_of(5));
  auto flipped = good;
  flipped[good.size() / 2] ^= 0x01;
  BOOST_CHECK(decode_checkpoint(flipped).status().message().find("checksum mismatch") != std::string_view::npos);
  for (size_t n : {size_t{0}, size_t{10}, size_t{24}, good.size() - 1}) {
    const auto r = decode_checkpoint(std::span(good.data(), n));
    BOOST_CHECK_MESSAGE(!r.ok() && r.status().message().find("truncated") != std::string_view::npos,
                        n << " bytes: " << r.status().to_string());
  }
  auto magic = good;
  magic[0] = 'X';
  BOOST_CHECK(decode_checkpoint(magic).status().message().find("bad magic") != std::string_view::npos);
  auto version = good;
  version[8] = 9;
  BOOST_CHECK(decode_checkpoint(version).status().message().find("format version 9") != std::string_view::npos);
}

BOOST_AUTO_TEST_CASE(store_loads_the_newest_and_prunes_beyond_keep) {
  testing::TempDir dir;
  auto store = open_store(dir.path() + "/ckpt", 3);
  for (uint64_t r = 1; r <= 5; ++r) BOOST_REQUIRE(store->write(state_of(r)).ok());
  BOOST_CHECK((*store->sequences() == std::vector<uint64_t>{3, 4, 5}));
  std::optional<CheckpointState> latest;
  BOOST_CHECK(load_warnings(*store, latest).empty());
  BOOST_REQUIRE(latest);
  BOOST_CHECK(*latest == state_of(5));
}

BOOST_AUTO_TEST_CASE(a_corrupted_or_truncated_newest_file_falls_back_to_the_previous_good_one) {
  testing::TempDir dir;
  auto store = open_store(dir.path(), 4);
  for (uint64_t r = 1; r <= 3; ++r) BOOST_REQUIRE(store->write(state_of(r)).ok());
  auto bytes = read_file(store->path_of(3));
  BOOST_REQUIRE(bytes.ok());
  auto corrupted = *bytes;
  corrupted[100] ^= 0xff;
  overwrite(store->path_of(3), corrupted);
  std::optional<CheckpointState> latest;
  auto warnings = load_warnings(*store, latest);
  BOOST_REQUIRE(latest);
  BOOST_CHECK_EQUAL(latest->rounds, 2u);
  BOOST_REQUIRE_EQUAL(warnings.size(), 1u);
  BOOST_CHECK(warnings[0].find(store->path_of(3)) != std::string::npos);
  BOOST_CHECK(warnings[0].find("checksum mismatch") != std::string::npos);

  bytes->resize(bytes->size() / 2);
  overwrite(store->path_of(2), *bytes);  // now 3 is corrupt and 2 truncated
  warnings = load_warnings(*store, latest);
  BOOST_REQUIRE(latest);
  BOOST_CHECK_EQUAL(latest->rounds, 1u);
  BOOST_CHECK_EQUAL(warnings.size(), 2u);
}

BOOST_AUTO_TEST_CASE(a_crash_before_the_rename_leaves_the_previous_checkpoint_loadable) {
  testing::TempDir dir;
  auto store = open_store(dir.path(), 3);
  BOOST_REQUIRE(store->write(state_of(1)).ok());
  // What a crash between write and rename leaves: the next file's temporary, half written.
  const auto next = encode_checkpoint(state_of(2));
  overwrite(store->path_of(2) + ".tmp", std::vector<uint8_t>(next.begin(), next.begin() + 100));
  std::optional<CheckpointState> latest;
  BOOST_CHECK(load_warnings(*store, latest).empty());
  BOOST_REQUIRE(latest);
  BOOST_CHECK_EQUAL(latest->rounds, 1u);
  // And the next write still works, over the stale temporary.
  BOOST_REQUIRE(store->write(state_of(2)).ok());
  load_warnings(*store, latest);
  BOOST_CHECK_EQUAL(latest->rounds, 2u);
}

BOOST_AUTO_TEST_CASE(another_models_checkpoint_is_never_loaded) {
  testing::TempDir dir;
  auto store = open_store(dir.path(), 3);
  auto other = state_of(9);
  other.fingerprint = 0xbadULL;
  BOOST_REQUIRE(store->write(other).ok());
  std::optional<CheckpointState> latest;
  const auto warnings = load_warnings(*store, latest);
  BOOST_CHECK(!latest);
  BOOST_REQUIRE_EQUAL(warnings.size(), 1u);
  BOOST_CHECK(warnings[0].find("another model") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(bytes_that_would_not_load_are_never_written) {
  testing::TempDir dir;
  auto store = open_store(dir.path(), 3);
  auto bytes = encode_checkpoint(state_of(1));
  bytes.back() ^= 1;
  BOOST_CHECK(!store->write_encoded(bytes).ok());
  BOOST_CHECK(store->sequences()->empty());
}

BOOST_AUTO_TEST_CASE(an_empty_or_missing_folder_has_no_checkpoint) {
  testing::TempDir dir;
  std::optional<CheckpointState> latest;
  BOOST_CHECK(load_warnings(*open_store(dir.path() + "/none", 3), latest).empty());
  BOOST_CHECK(!latest);
}

BOOST_AUTO_TEST_CASE(a_state_that_is_not_finite_is_never_loaded_nor_written) {
  testing::TempDir dir;
  auto store = open_store(dir.path(), 3);
  BOOST_REQUIRE(store->write(state_of(1)).ok());
  for (int field : {0, 1, 2}) {
    auto diverged = state_of(2);
    std::vector<float>& where = field == 0   ? diverged.fragments[1].values
                                : field == 1 ? diverged.fragments[1].momentum
                                             : diverged.optimizer->v;
    where[5] = std::numeric_limits<float>::quiet_NaN();
    const auto bytes = encode_checkpoint(diverged);  // checksum and all: valid bytes, invalid numbers
    const auto decoded = decode_checkpoint(bytes);
    BOOST_REQUIRE(!decoded.ok());
    BOOST_CHECK_MESSAGE(decoded.status().message().find(field == 2 ? "optimizer" : "fragment 1") !=
                                std::string_view::npos &&
                            decoded.status().message().find("not finite") != std::string_view::npos,
                        decoded.status().to_string());
    BOOST_CHECK(!store->write_encoded(bytes).ok());
    overwrite(store->path_of(2), bytes);  // as if written by another program
    std::optional<CheckpointState> latest;
    const auto warnings = load_warnings(*store, latest);
    BOOST_REQUIRE(latest);
    BOOST_CHECK_EQUAL(latest->rounds, 1u);  // the last good one
    BOOST_CHECK_EQUAL(warnings.size(), 1u);
    std::filesystem::remove(store->path_of(2));
  }
}

BOOST_AUTO_TEST_CASE(a_stray_name_beyond_64_bits_is_skipped_with_a_warning) {
  testing::TempDir dir;
  auto store = open_store(dir.path(), 3);
  BOOST_REQUIRE(store->write(state_of(1)).ok());
  overwrite(dir.path() + "/checkpoint-99999999999999999999999.atoll", encode_checkpoint(state_of(7)));
  std::optional<CheckpointState> latest;
  const auto warnings = load_warnings(*store, latest);
  BOOST_REQUIRE(latest);
  BOOST_CHECK_EQUAL(latest->rounds, 1u);
  BOOST_REQUIRE_EQUAL(warnings.size(), 1u);
  BOOST_CHECK(warnings[0].find("64 bits") != std::string::npos);
  const auto written = store->write(state_of(2));  // and writing goes on after it
  BOOST_REQUIRE(written.ok());
  BOOST_CHECK_EQUAL(*written, store->path_of(2));
}

BOOST_AUTO_TEST_CASE(points_of_a_curve_are_kept_beside_the_checkpoints_and_never_pruned) {
  testing::TempDir dir;
  auto store = open_store(dir.path(), 2);
  BOOST_REQUIRE(store->write_point(0, encode_checkpoint(state_of(10))).ok());
  const auto written = store->write_point(1, encode_checkpoint(state_of(20)));
  BOOST_REQUIRE(written.ok());
  BOOST_CHECK_EQUAL(*written, dir.path() + "/point-1.atoll");
  for (uint64_t r = 1; r <= 4; ++r) BOOST_REQUIRE(store->write(state_of(r)).ok());  // pruning checkpoints
  std::optional<CheckpointState> latest;
  BOOST_CHECK(load_warnings(*store, latest).empty());  // points are not checkpoints, nor strays
  BOOST_REQUIRE(latest);
  BOOST_CHECK_EQUAL(latest->rounds, 4u);
  auto first = store->load_point(0, 0xfeedULL);
  BOOST_REQUIRE(first.ok() && *first);
  BOOST_CHECK(**first == state_of(10));
  auto none = store->load_point(2, 0xfeedULL);
  BOOST_REQUIRE(none.ok());
  BOOST_CHECK(!*none);
  // Another model's, or a damaged one: an error naming the file, not a point skipped.
  auto other = store->load_point(1, 0xbeefULL);
  BOOST_REQUIRE(!other.ok());
  BOOST_CHECK(other.status().to_string().find("point-1.atoll") != std::string::npos);
  auto bytes = encode_checkpoint(state_of(20));
  bytes[bytes.size() / 2] ^= 0xff;
  overwrite(dir.path() + "/point-1.atoll", bytes);
  auto damaged = store->load_point(1, 0xfeedULL);
  BOOST_REQUIRE(!damaged.ok());
  BOOST_CHECK_MESSAGE(damaged.status().to_string().find("point-1.atoll") != std::string::npos, damaged.status().to_string());
  BOOST_CHECK(!store->write_point(2, std::span(bytes)).ok());  // bytes that would not load are never written
}

BOOST_AUTO_TEST_CASE(a_folder_that_cannot_be_read_is_an_error_not_a_fresh_start) {
  if (::geteuid() == 0) {
    BOOST_TEST_MESSAGE("skipped: root reads any folder");
    return;
  }
  testing::TempDir dir;
  const std::string run = dir.path() + "/run";
  BOOST_REQUIRE(open_store(run, 3)->write(state_of(1)).ok());
  std::filesystem::permissions(run, std::filesystem::perms::owner_write | std::filesystem::perms::owner_exec);
  auto store = CheckpointStore::open(run, 3);
  std::filesystem::permissions(run, std::filesystem::perms::owner_all);
  BOOST_REQUIRE(!store.ok());
  BOOST_CHECK_MESSAGE(store.status().message().find(run) != std::string_view::npos, store.status().to_string());
}

BOOST_AUTO_TEST_CASE(a_second_store_on_a_locked_folder_is_refused_until_the_first_is_gone) {
  testing::TempDir dir;
  auto first = open_store(dir.path(), 3);
  auto second = CheckpointStore::open(dir.path(), 3);
  BOOST_REQUIRE(!second.ok());
  BOOST_CHECK_MESSAGE(second.status().message().find("in use by another syncer (process " +
                                                     std::to_string(::getpid())) != std::string_view::npos,
                      second.status().to_string());
  first.reset();
  BOOST_CHECK(CheckpointStore::open(dir.path(), 3).ok());
}

// A whole restart (syncer and learners in one process) resumes warm: the
// checkpoint carries AdamW state, and learners that come back without bases
// are welcomed with it. dp keeps its syncer-side optimizer.
namespace {
// A syncer core with learners 0 and 1 registered (incarnation 1).
testing::SyncerCoreDriver two_learners(const Topology& t) {
  testing::SyncerCoreDriver s(t);
  s.must_join(0);
  s.must_join(1);
  return s;
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_decoupled_checkpoint_carries_a_learners_moments_and_a_restart_welcomes_with_them) {
  auto s = two_learners(testing::tiny_mlp_topology(Mode::kDecoupled));
  const Topology& t = s.topology;
  const auto now = testing::at(0);
  auto& core = s.core;
  SyncerEffects fx;
  core->on_progress(Progress{1, 1, 30, 240, 0.01, {{0, 30}}, 1.0f}, now, fx);
  fx = {};
  core->request_checkpoint_moments(fx);
  BOOST_REQUIRE_EQUAL(fx.sends.size(), 1u);
  BOOST_CHECK_EQUAL(fx.sends[0].learner, 1u);  // the one that trained the most
  const auto pull = std::get<MomentsPull>(fx.sends[0].message);
  const std::vector<float> m(s.n, 0.25f), v(s.n, 0.0625f);
  core->on_moments(1, Moments{pull.request, OptimizerState{30, encode_payload(Codec::kBf16, 0, m),
                                                            encode_payload(Codec::kBf16, 0, v)}},
                   now, fx);
  const CheckpointState saved = copy_of(core->checkpoint(1700000000000));
  BOOST_REQUIRE(saved.optimizer.has_value());
  BOOST_CHECK_EQUAL(saved.optimizer->step, 30);
  BOOST_CHECK_EQUAL(saved.optimizer->m[3], 0.25f);

  auto again = SyncerCore::create(t, now);  // the whole process restarted
  BOOST_REQUIRE((*again)->restore(*decode_checkpoint(encode_checkpoint(saved))).ok());
  fx = {};
  (*again)->on_register(Register{0, 1, s.fingerprint, "", {}}, Sender{1, 1}, now, fx);
  const Welcome* w = nullptr;
  for (const auto& send : fx.sends)
    if (std::holds_alternative<Welcome>(send.message)) w = &std::get<Welcome>(send.message);
  BOOST_REQUIRE(w);
  BOOST_REQUIRE(w->moments.has_value());
  BOOST_CHECK_EQUAL(w->moments->step, 30);

  Topology off = t;
  off.checkpoint.moments = false;
  auto cold = SyncerCore::create(off, now);
  fx = {};
  (*cold)->request_checkpoint_moments(fx);
  BOOST_CHECK(fx.sends.empty());
  BOOST_CHECK(!(*cold)->checkpoint(0).optimizer.has_value());
}

BOOST_AUTO_TEST_CASE(a_dp_checkpoint_carries_the_syncers_optimizer) {
  auto s = two_learners(testing::tiny_mlp_topology(Mode::kDp));
  const Topology& t = s.topology;
  const auto now = testing::at(0);
  for (uint32_t m = 0; m < 2; ++m) s.push(m, 0, 1, 0.5f, 0);  // one synchronous step: both gradients
  const CheckpointState saved = copy_of(s.core->checkpoint(0));
  BOOST_REQUIRE(saved.optimizer.has_value());
  BOOST_CHECK_EQUAL(saved.optimizer->step, 1);
  BOOST_CHECK_GT(saved.optimizer->v[0], 0.0f);
  auto again = SyncerCore::create(t, now);
  BOOST_REQUIRE((*again)->restore(saved).ok());
  BOOST_CHECK(copy_of((*again)->checkpoint(0)).optimizer == saved.optimizer);
}

// Fragment vectors mean something only under the plan that cut them: a
// checkpoint written for another plan is refused, both plans named, even
// when its fragments have this plan's sizes. One from before plans were
// recorded (0) is still restored, its sizes checked as before.
BOOST_AUTO_TEST_CASE(a_checkpoint_of_another_fragment_plan_is_refused_naming_both) {
  const Topology t = testing::tiny_mlp_topology();
  const auto now = testing::at(0);
  auto core = SyncerCore::create(t, now);
  BOOST_REQUIRE(core.ok());
  CheckpointState saved = copy_of((*core)->checkpoint(0));
  const uint64_t plan = plan_fingerprint((*core)->fragments());
  BOOST_CHECK_EQUAL(saved.plan_fingerprint, plan);
  BOOST_CHECK_EQUAL(decode_checkpoint(encode_checkpoint(saved))->plan_fingerprint, plan);
  auto again = SyncerCore::create(t, now);
  BOOST_CHECK((*again)->restore(saved).ok());

  saved.plan_fingerprint = plan ^ 1;  // the same sizes, another plan
  auto other = SyncerCore::create(t, now);
  const Status refused = (*other)->restore(saved);
  BOOST_REQUIRE(!refused.ok());
  BOOST_TEST_MESSAGE(refused.to_string());
  const std::string why(refused.message());
  BOOST_CHECK(why.find(std::to_string(plan ^ 1)) != std::string::npos);
  BOOST_CHECK(why.find(std::to_string(plan)) != std::string::npos);
  BOOST_CHECK(why.find("outer.fragments") != std::string::npos);

  saved.plan_fingerprint = 0;  // written before plans were recorded
  auto older = SyncerCore::create(t, now);
  BOOST_CHECK((*older)->restore(saved).ok());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
