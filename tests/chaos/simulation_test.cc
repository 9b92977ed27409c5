// The cluster simulator: plans that mean what they say (and name the file,
// line and key when they don't), delays drawn as their distribution says,
// goodput that matches closed forms where there is one, and decoupled rounds
// that the real SyncerCore runs for any number of learners.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "atoll/simulation.h"

namespace atl {
namespace {

// A plan of `body` with no failures worth the name, unless `body` says so.
Result<SimulationPlan> plan_of(const std::string& body) { return parse_simulation_plan(body, "plan.toml"); }

SimulationPlan must(const std::string& body) {
  auto p = plan_of(body);
  BOOST_REQUIRE_MESSAGE(p.ok(), p.status().to_string());
  return *p;
}

void expect_error(const std::string& body, const std::string& wanted) {
  auto p = plan_of(body);
  BOOST_REQUIRE_MESSAGE(!p.ok(), "accepted: " << body);
  BOOST_CHECK_MESSAGE(p.status().message().find(wanted) != std::string_view::npos,
                      "wanted '" << wanted << "' in: " << p.status().to_string());
}

// Failures set by each test; a grid only because a plan needs something to simulate.
constexpr const char* kQuiet = R"(
max_hours = 20
precision = 0.01
[training]
step_seconds = 10
set = ["outer.sync_every=12", "outer.fragments=4"]
[grid]
chips = [1000]
)";

CellResult simulate(const SimulationPlan& plan, Mode mode, int learners, int64_t chips, int quorum = 1) {
  auto r = simulate_cell(plan, SimulationCell{mode, learners, chips, quorum, 0});
  BOOST_REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  return *r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(simulation_test)

BOOST_AUTO_TEST_CASE(a_plan_means_what_it_says) {
  const SimulationPlan p = must(R"(
name = "t"
seed = 7
[failures]
mtbi_chip_years = 2.5
slice_chips = 64
[failures.recovery]
distribution = "exponentiated_weibull"
scale_seconds = 50
shape = 0.8
exponent = 2
[training]
step_seconds = 4
set = ["outer.sync_every=20"]
[grid]
modes = ["dp", "decoupled"]
chips = [1000, 2000]
learners = [2, 4]
[[reference]]
mode = "decoupled"
learners = 4
goodput = [0.9, -1]
)");
  BOOST_CHECK_EQUAL(p.name, "t");
  BOOST_CHECK_EQUAL(p.seed, 7u);
  BOOST_CHECK_EQUAL(p.failures.mtbi_chip_years, 2.5);
  BOOST_CHECK_EQUAL(p.failures.slice_chips, 64);
  BOOST_CHECK(p.failures.recovery.kind == DelayModel::Kind::kExponentiatedWeibull);
  BOOST_CHECK_EQUAL(p.training.outer.sync_every, 20);
  BOOST_REQUIRE_EQUAL(p.cells.size(), 2u + 4u);  // dp at 2 sizes, decoupled M = 2, 4 at 2 sizes
  BOOST_CHECK(p.cells[0].mode == Mode::kDp);
  BOOST_REQUIRE_EQUAL(p.references.size(), 1u);  // -1: no figure
  BOOST_CHECK_EQUAL(p.references[0].chips, 1000);
  BOOST_CHECK_EQUAL(p.references[0].learners, 4);
}

BOOST_AUTO_TEST_CASE(a_bad_plan_names_the_file_the_line_and_the_key) {
  expect_error("[grid]\nchips = [10]\n[failures]\nmtbi = 1\n", "plan.toml:4");
  expect_error("[grid]\nchips = [10]\n[failures]\nmtbi = 1\n", "failures.mtbi");
  expect_error("[grid]\nchips = [10]\n[failures]\nmtbi_chip_years = -1\n", "failures.mtbi_chip_years");
  expect_error("[grid]\nchips = [10]\n[failures.recovery]\ndistribution = \"gamma\"\n", "failures.recovery.distribution");
  expect_error("[grid]\nchips = [10]\n[training]\nset = [\"inner.lr=1\"]\n", "training.set[0]");
  expect_error("[grid]\nchips = [10]\n[training]\nset = [\"outer.sync_every=zero\"]\n", "outer.sync_every");
  expect_error("[grid]\nchips = [10, 20]\n[[reference]]\nmode = \"dp\"\ngoodput = [0.5]\n", "reference[0].goodput");
  expect_error("[grid]\nchips = [10]\n[[reference]]\nmode = \"dp\"\ngoodput = [1.5]\n", "reference[0].goodput[0]");
  expect_error("[grid]\nchips = [4]\nlearners = [8]\nmodes = [\"decoupled\"]\n", "grid.chips");
  expect_error("[grid]\nchips = [10]\nmodes = [\"ring\"]\n", "grid.modes[0]");
  expect_error("seed = 1\n", "nothing to simulate");
  expect_error("[grid\n", "plan.toml:1");
}

BOOST_AUTO_TEST_CASE(delays_are_drawn_as_their_distribution_says) {
  Rng rng(3);
  DelayModel w;  // exponent 1, shape 1: an exponential of mean scale
  w.kind = DelayModel::Kind::kExponentiatedWeibull;
  w.scale_seconds = 40.0;
  w.shape = 1.0;
  w.exponent = 1.0;
  BOOST_CHECK_CLOSE(w.mean(), 40.0, 0.5);
  w.shape = 0.7;
  w.exponent = 3.0;
  double sum = 0.0;
  constexpr int kN = 200000;
  for (int i = 0; i < kN; ++i) sum += w.sample(rng);
  BOOST_CHECK_CLOSE(sum / kN, w.mean(), 2.0);  // numeric mean against the sampler
  BOOST_CHECK_CLOSE(w.quantile(0.5), w.scale_seconds * std::pow(-std::log(1.0 - std::pow(0.5, 1.0 / 3.0)), 1.0 / 0.7),
                    0.1);
  DelayModel f;
  f.kind = DelayModel::Kind::kFixed;
  f.seconds = 12.0;
  BOOST_CHECK_EQUAL(f.sample(rng), 12.0);
}

BOOST_AUTO_TEST_CASE(the_same_plan_gives_the_same_figures) {
  SimulationPlan p = must(std::string(kQuiet) + "[failures.recovery]\ndistribution = \"exponential\"\nseconds = 60\n");
  p.failures.mtbi_chip_years = 1.0;
  const CellResult a = simulate(p, Mode::kDecoupled, 4, 600000);
  const CellResult b = simulate(p, Mode::kDecoupled, 4, 600000);
  BOOST_CHECK_EQUAL(a.goodput, b.goodput);
  BOOST_CHECK_EQUAL(a.events, b.events);
  BOOST_CHECK_EQUAL(a.rounds, b.rounds);
  p.seed += 1;
  BOOST_CHECK_NE(simulate(p, Mode::kDecoupled, 4, 600000).events, a.events);
}

// dp with one slice, a fixed recovery D and no restart cost: the job is up
// for U ~ Exp(L) (L = N / MTBI), then down for D. It trains in steps of s and
// loses the one under way, so an up period completes floor(U / s) steps, of
// mean q / (1 - q) with q = exp(-L s):
//   goodput = s q / (1 - q) / (1/L + D),   uptime = 1 / (1 + L D).
BOOST_AUTO_TEST_CASE(dp_goodput_matches_its_closed_form) {
  SimulationPlan p = must(std::string(kQuiet) + R"(
[failures.recovery]
distribution = "fixed"
seconds = 120
)");
  p.failures.mtbi_chip_years = 1.0;
  p.failures.while_down = false;
  p.max_hours = 5000;
  const int64_t chips = 300000;
  p.failures.slice_chips = chips;
  const double rate = double(chips) / (365.25 * 86400.0), step = 10.0, q = std::exp(-rate * step);
  const CellResult r = simulate(p, Mode::kDp, 1, chips);
  const double goodput = step * q / (1.0 - q) / (1.0 / rate + 120.0), uptime = 1.0 / (1.0 + rate * 120.0);
  BOOST_TEST_MESSAGE("dp " << r.goodput << " +- " << r.goodput_halfwidth << ", closed form " << goodput
                           << "; uptime " << r.uptime << ", closed form " << uptime);
  BOOST_CHECK_LE(std::abs(r.goodput - goodput), std::max(0.01, 2.0 * r.goodput_halfwidth));
  BOOST_CHECK_LE(std::abs(r.uptime - uptime), std::max(0.01, 2.0 * r.goodput_halfwidth));
  BOOST_CHECK_LT(r.goodput, r.uptime - 0.01);  // the steps lost
}

// With no failures, every learner's steps reach the global model whatever M
// and K: the rounds the SyncerCore runs neither stall nor drop progress.
BOOST_AUTO_TEST_CASE(without_failures_every_step_is_merged_for_any_number_of_learners) {
  SimulationPlan p = must(kQuiet);
  p.failures.mtbi_chip_years = 1e6;
  for (int m : {1, 2, 3, 8, 64}) {
    for (int k : {1, std::max(1, m / 2)}) {
      const CellResult r = simulate(p, Mode::kDecoupled, m, 1000 * m, k);
      BOOST_TEST_MESSAGE("M=" << m << " K=" << k << ": goodput " << r.goodput << ", uptime " << r.uptime << ", "
                              << r.rounds << " rounds");
      BOOST_CHECK_GT(r.goodput, 0.97);
      BOOST_CHECK_GT(r.uptime, 0.97);
      // About one round per fragment per H steps.
      const double expected_rounds = r.simulated_hours * 3600.0 / (12 * 10.0) * 4;
      BOOST_CHECK_GT(double(r.rounds), 0.8 * expected_rounds);
      BOOST_CHECK_LT(double(r.rounds), 1.2 * expected_rounds * m);
    }
  }
}

// The paper's ordering: more chips lose more; elastic beats dp; decoupled
// learners beat elastic dp, and more of them beat fewer.
BOOST_AUTO_TEST_CASE(goodput_orders_as_the_paper_says) {
  SimulationPlan p = must(std::string(kQuiet) + R"(
[failures]
slice_chips = 256
while_down = false
downscale_seconds = 10
upscale_seconds = 10
[failures.recovery]
distribution = "exponential"
seconds = 80
)");
  p.max_hours = 300;
  const double dp_small = simulate(p, Mode::kDp, 1, 150000).goodput;
  const double dp_big = simulate(p, Mode::kDp, 1, 1200000).goodput;
  const double elastic = simulate(p, Mode::kElasticDp, 1, 1200000).goodput;
  const double m2 = simulate(p, Mode::kDecoupled, 2, 1200000).goodput;
  const double m8 = simulate(p, Mode::kDecoupled, 8, 1200000).goodput;
  BOOST_TEST_MESSAGE("dp " << dp_small << " / " << dp_big << ", elastic " << elastic << ", M=2 " << m2 << ", M=8 " << m8);
  BOOST_CHECK_GT(dp_small, dp_big + 0.1);
  BOOST_CHECK_GT(elastic, dp_big + 0.1);
  BOOST_CHECK_GT(m2, elastic);
  BOOST_CHECK_GT(m8, m2 + 0.05);
}

// Timing invariants in virtual time, decided by the real SyncerCore: learners
// that restart on every interruption are welcomed back within a few message
// latencies and at most one step of a peer (its AdamW moments), and the goodput they
// keep is bounded by the time they are up.
BOOST_AUTO_TEST_CASE(restarted_learners_are_welcomed_back_in_virtual_time) {
  SimulationPlan p = must(std::string(kQuiet) + R"(
[failures]
slice_chips = 1000
while_down = false
restart_seconds = 5
[failures.recovery]
distribution = "exponential"
seconds = 60
)");
  p.failures.mtbi_chip_years = 1.0;
  p.training.learner_failure = LearnerFailure::kRestart;
  p.max_hours = 200;
  const CellResult r = simulate(p, Mode::kDecoupled, 8, 80000);
  const double bound = 4 * p.training.latency_seconds + p.training.step_seconds;
  BOOST_TEST_MESSAGE(r.reintegrations << " re-integrations, mean " << r.reintegration_seconds_mean << " s, max "
                                      << r.reintegration_seconds_max << " s (bound " << bound << " s); goodput "
                                      << r.goodput << ", " << r.interruptions << " interruptions");
  BOOST_CHECK_GT(r.reintegrations, 100u);
  BOOST_CHECK_LE(r.reintegration_seconds_max, bound);
  BOOST_CHECK_GE(r.reintegration_seconds_mean, 2 * p.training.latency_seconds);  // a Register and a Welcome
  // A learner (10,000 chips) is down for a recovery and a restart per interruption.
  const double rate = 10000.0 / (365.25 * 86400.0), up = 1.0 / (1.0 + rate * (60.0 + 5.0));
  BOOST_CHECK_LT(r.goodput, up + 0.01);
  BOOST_CHECK_GT(r.goodput, up - 0.1);
}

BOOST_AUTO_TEST_CASE(the_report_has_a_row_per_cell_and_null_where_there_is_no_reference) {
  const SimulationPlan p = must(R"(
max_hours = 20
[grid]
modes = ["dp", "decoupled"]
chips = [1000]
learners = [2]
[[reference]]
mode = "dp"
goodput = [0.99]
[planning]
chips = 1000
learners = [1, 2]
)");
  auto r = run_simulation(p);
  BOOST_REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  BOOST_CHECK_EQUAL(r->cells.size(), 2u);
  BOOST_CHECK_EQUAL(r->rule_of_thumb.size(), 1u);  // decoupled M = 2 against elastic_dp at 500 chips
  BOOST_CHECK_EQUAL(r->rule_of_thumb[0].cell.chips, 500);
  BOOST_CHECK_EQUAL(r->planning.size(), 2u);
  const std::string json = simulation_json(p, *r);
  BOOST_CHECK(json.find("\"rows\":[{\"mode\":\"dp\",\"learners\":1,\"chips\":1000,") != std::string::npos);
  BOOST_CHECK(json.find("\"paper\":0.99") != std::string::npos);
  BOOST_CHECK(json.find("\"paper\":null") != std::string::npos);
  BOOST_CHECK(simulation_table(p, *r).find("(99)") != std::string::npos);
  const std::string svg = planning_svg(p, *r);
  BOOST_CHECK(svg.starts_with("<svg"));
  BOOST_CHECK_EQUAL(std::count(svg.begin(), svg.end(), '\n') > 10, true);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
