// The cluster token: proofs admit exactly the registration they were made
// for, tokens load with clear errors, a syncer that requires a token
// refuses a Register without the right proof before looking at anything else,
// and learner processes never share an incarnation.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <fstream>

#include "atoll/cluster_token.h"
#include "atoll/incarnation.h"
#include "atoll/syncer_core.h"
#include "test_support.h"

namespace atl {
namespace {

const std::string kToken = "correct horse battery staple";

const Reject* reject_to(const SyncerEffects& fx, uint32_t learner) {
  for (const auto& s : fx.sends)
    if (s.learner == learner)
      if (const auto* r = std::get_if<Reject>(&s.message)) return r;
  return nullptr;
}

bool welcomed(const SyncerEffects& fx, uint32_t learner) {
  for (const auto& s : fx.sends)
    if (s.learner == learner && std::holds_alternative<Welcome>(s.message)) return true;
  return false;
}

std::string write_file(const testing::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cluster_token_test)

BOOST_AUTO_TEST_CASE(a_proof_admits_only_what_it_was_made_for) {
  const std::string proof = join_proof(kToken, 2, 7, 0xabcdef);
  BOOST_CHECK_EQUAL(proof.size(), 32u);
  BOOST_CHECK(check_join_proof(kToken, proof, 2, 7, 0xabcdef));
  BOOST_CHECK(!check_join_proof(kToken, proof, 3, 7, 0xabcdef));       // another learner
  BOOST_CHECK(!check_join_proof(kToken, proof, 2, 8, 0xabcdef));       // another incarnation
  BOOST_CHECK(!check_join_proof(kToken, proof, 2, 7, 0xabcdee));       // another model
  BOOST_CHECK(!check_join_proof(kToken + "!", proof, 2, 7, 0xabcdef)); // another token
  BOOST_CHECK(!check_join_proof(kToken, proof.substr(0, 31), 2, 7, 0xabcdef));
  BOOST_CHECK(!check_join_proof(kToken, "", 2, 7, 0xabcdef));
  BOOST_CHECK(proof.find(kToken) == std::string::npos);
}

BOOST_AUTO_TEST_CASE(fresh_tokens_are_long_and_differ) {
  const std::string a = make_cluster_token(), b = make_cluster_token();
  BOOST_CHECK_EQUAL(a.size(), 64u);
  BOOST_CHECK(a != b);
  BOOST_CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(tokens_load_from_a_file_or_the_environment_with_clear_errors) {
  const testing::TempDir dir;
  auto from_file = load_cluster_token(write_file(dir, "atoll-token-ok", kToken + "\n"));
  BOOST_REQUIRE(from_file.ok());
  BOOST_CHECK_EQUAL(*from_file, kToken);  // the trailing newline is not part of it

  auto short_one = load_cluster_token(write_file(dir, "atoll-token-short", "abc\n"));
  BOOST_REQUIRE(!short_one.ok());
  BOOST_CHECK(short_one.status().message().find("atoll-token-short") != std::string_view::npos);
  BOOST_CHECK(short_one.status().message().find("at least 16") != std::string_view::npos);

  auto missing = load_cluster_token("/nonexistent/atoll-token");
  BOOST_REQUIRE(!missing.ok());
  BOOST_CHECK(missing.status().message().find("/nonexistent/atoll-token") != std::string_view::npos);

  ::unsetenv(kTokenEnv);
  auto unset = load_cluster_token("");
  BOOST_REQUIRE(!unset.ok());
  BOOST_CHECK(unset.status().message().find(kTokenEnv) != std::string_view::npos);
  ::setenv(kTokenEnv, kToken.c_str(), 1);
  auto from_env = load_cluster_token("");
  ::unsetenv(kTokenEnv);
  BOOST_REQUIRE(from_env.ok());
  BOOST_CHECK_EQUAL(*from_env, kToken);
}

BOOST_AUTO_TEST_CASE(a_syncer_that_requires_the_token_refuses_registers_without_its_proof) {
  const auto now = SteadyTime{};
  auto core = SyncerCore::create(testing::tiny_mlp_topology(), now);
  BOOST_REQUIRE(core.ok());
  (*core)->require_token(kToken);
  const uint64_t fingerprint = (*core)->layout().fingerprint();

  SyncerEffects fx;
  (*core)->on_register(Register{0, 1, fingerprint, "", {}}, Sender{1, 1}, now, fx);
  const Reject* r = reject_to(fx, 0);
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->reason == RejectReason::kBadToken);
  BOOST_CHECK(r->detail.find("no cluster token") != std::string::npos);

  fx = {};
  (*core)->on_register(Register{0, 1, fingerprint, join_proof("another token, long enough", 0, 1, fingerprint), {}},
                       Sender{1, 1}, now, fx);
  BOOST_REQUIRE(reject_to(fx, 0));
  BOOST_CHECK(reject_to(fx, 0)->reason == RejectReason::kBadToken);

  // A proof made for learner 1 does not admit learner 0.
  fx = {};
  (*core)->on_register(Register{0, 1, fingerprint, join_proof(kToken, 1, 1, fingerprint), {}}, Sender{1, 1}, now, fx);
  BOOST_REQUIRE(reject_to(fx, 0));
  BOOST_CHECK(!welcomed(fx, 0));
  BOOST_CHECK_EQUAL((*core)->stats().rejected, 3u);
  BOOST_CHECK(!(*core)->learners()[0].connected);

  fx = {};
  (*core)->on_register(Register{0, 1, fingerprint, join_proof(kToken, 0, 1, fingerprint), {}}, Sender{1, 1}, now, fx);
  BOOST_CHECK(!reject_to(fx, 0));
  BOOST_CHECK(welcomed(fx, 0));
  BOOST_CHECK((*core)->learners()[0].connected);
}

// Two learner processes of one id started in the same millisecond must not
// share an incarnation (the clock alone, ms x 1000, gave both the same one);
// a process started later must still count above every earlier one.
BOOST_AUTO_TEST_CASE(incarnations_of_learner_processes_never_collide_and_grow_with_the_clock) {
  const uint64_t ms = 1'700'000'000'000;  // November 2023
  BOOST_CHECK_NE(incarnation_base(ms, 1), incarnation_base(ms, 2));
  BOOST_CHECK_GT(incarnation_base(ms + 1, 0), incarnation_base(ms, ~uint64_t{0}));
  BOOST_CHECK_GT(incarnation_base(), incarnation_base(ms, ~uint64_t{0}));  // now is later
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
