// The cluster simulator: plans that mean what they say (and name the file,
// line and key when they don't), delays drawn as their distribution says,
// goodput that matches closed forms where there is one, decoupled rounds
// that the real SyncerCore runs for any number of learners, and scavenged
// learners that come and go through the real SyncerCore's membership.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <fstream>

#include "atoll/simulation.h"
#include "test_support.h"

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

// A core of two learners that hardly fail, and machines that come and go
// beside it as each test sets them.
constexpr const char* kScavenging = R"(
max_hours = 200
precision = 0.01
[failures]
mtbi_chip_years = 1000000
[training]
step_seconds = 10
set = ["outer.sync_every=12", "outer.fragments=4"]
[scavenging]
core = 2
)";

// The scavenging cell with k learners beside the plan's core.
CellResult scavenge(const SimulationPlan& plan, int k) {
  const ScavengingPlan& s = *plan.scavenging;
  auto r = simulate_cell(plan, SimulationCell{Mode::kDecoupled, s.core, s.core * s.learner_chips, s.quorum, 0, k});
  BOOST_REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  BOOST_TEST_MESSAGE(k << " scavenged: goodput " << r->goodput << " +- " << r->goodput_halfwidth
                       << ", learners allocated " << r->allocated_learners << ", merged " << r->merged_learners << ", trained "
                       << r->trained_learners << "; " << r->joins << " joins, " << r->departures << " departures, "
                       << r->vanished << " vanished, " << r->released << " released, " << r->cut_short
                       << " cut short over " << r->measured_hours << " h");
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

// A syncer in shards merges the same rounds: each shard its own fragments,
// each in its own SyncerCore, and the shards split the syncer's work.
BOOST_AUTO_TEST_CASE(a_sharded_syncer_merges_every_fragment_as_one_syncer_does) {
  SimulationPlan one = must(kQuiet);
  one.failures.mtbi_chip_years = 1e6;
  SimulationPlan two = must(std::string(kQuiet).replace(std::string(kQuiet).find("outer.fragments=4\""),
                                                         std::string("outer.fragments=4\"").size(),
                                                         "outer.fragments=4\", \"syncer.shards=2\""));
  two.failures.mtbi_chip_years = 1e6;
  BOOST_REQUIRE_EQUAL(two.training.syncer_shards, 2);
  const CellResult a = simulate(one, Mode::kDecoupled, 8, 8000, 4), b = simulate(two, Mode::kDecoupled, 8, 8000, 4);
  BOOST_TEST_MESSAGE("one syncer: " << a.rounds << " rounds, goodput " << a.goodput << "; two shards: " << b.rounds
                                    << " rounds, goodput " << b.goodput << ", busiest shard "
                                    << b.syncer_busiest_shard_seconds << " of " << b.syncer_seconds << " s");
  BOOST_CHECK_GT(b.goodput, 0.97);
  BOOST_CHECK_CLOSE(double(b.rounds), double(a.rounds), 5.0);
  BOOST_CHECK_LT(b.syncer_busiest_shard_seconds, b.syncer_seconds);  // the other shard did some of it
  BOOST_CHECK_EQUAL(a.syncer_busiest_shard_seconds, a.syncer_seconds);
  expect_error(std::string(kQuiet).replace(std::string(kQuiet).find("outer.fragments=4\""),
                                           std::string("outer.fragments=4\"").size(),
                                           "outer.fragments=4\", \"syncer.shards=5\""),
               "syncer.shards = 5 is outside [1, 4]");
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

BOOST_AUTO_TEST_CASE(a_scavenging_plan_means_what_it_says) {
  const SimulationPlan d = must("[scavenging]\n");
  BOOST_REQUIRE(d.scavenging);
  BOOST_CHECK(d.cells.empty());  // a plan may be only scavenging
  BOOST_CHECK_EQUAL(d.scavenging->core, 2);
  BOOST_CHECK(d.scavenging->scavenged == std::vector<int>({0, 2, 4, 8}));
  BOOST_CHECK_EQUAL(d.scavenging->availability, 0.5);
  BOOST_CHECK_EQUAL(d.scavenging->notice_seconds, 30.0);
  BOOST_CHECK_CLOSE(d.scavenging->mean_cycle_seconds(8), 7200.0, 1e-9);  // an hour up, an hour down

  // A trace is read relative to the plan, rows of a learner in order.
  testing::TempDir dir;
  std::ofstream(dir.file("spot.csv")) << "# two machines\nlearner,up_seconds,down_seconds,notice_seconds\n"
                                      << "0, 600 ,60   # the first\n1,0,300\n\n1,1200,600,0\r\n0,300,30\n";
  std::ofstream(dir.file("plan.toml")) << "[scavenging]\ncore = 3\nscavenged = [1, 2]\nquorum = 2\n"
                                       << "learner_chips = 8\nnotice_seconds = 10\ntrace = \"spot.csv\"\n";
  auto p = load_simulation_plan(dir.file("plan.toml"));
  BOOST_REQUIRE_MESSAGE(p.ok(), p.status().to_string());
  const ScavengingPlan& s = *p->scavenging;
  BOOST_CHECK_EQUAL(s.core, 3);
  BOOST_CHECK(s.scavenged == std::vector<int>({1, 2}));
  BOOST_CHECK_EQUAL(s.quorum, 2);
  BOOST_CHECK_EQUAL(s.learner_chips, 8);
  BOOST_CHECK_EQUAL(s.trace_path, "spot.csv");
  BOOST_REQUIRE_EQUAL(s.trace.size(), 2u);
  BOOST_REQUIRE_EQUAL(s.trace[0].size(), 2u);
  BOOST_CHECK_EQUAL(s.trace[0][0].up_seconds, 600.0);
  BOOST_CHECK_EQUAL(s.trace[0][0].notice_seconds, -1.0);  // the plan's
  BOOST_CHECK_EQUAL(s.trace[0][1].down_seconds, 30.0);
  BOOST_REQUIRE_EQUAL(s.trace[1].size(), 2u);
  BOOST_CHECK_EQUAL(s.trace[1][0].up_seconds, 0.0);  // it starts down
  BOOST_CHECK_EQUAL(s.trace[1][1].notice_seconds, 0.0);
  BOOST_CHECK_CLOSE(s.mean_cycle_seconds(1), (660.0 + 330.0) / 2, 1e-9);
}

BOOST_AUTO_TEST_CASE(a_bad_scavenging_plan_names_the_file_the_line_and_the_key) {
  expect_error("[scavenging]\ncore = 2\nnotice = 30\n", "plan.toml:3");
  expect_error("[scavenging]\ncore = 2\nnotice = 30\n", "scavenging.notice");
  expect_error("[scavenging]\ncore = 0\n", "scavenging.core");
  expect_error("[scavenging]\nscavenged = [2, -1]\n", "scavenging.scavenged[1]");
  expect_error("[scavenging]\navailability = 0\n", "scavenging.availability");
  expect_error("[scavenging]\navailability = 1.5\n", "scavenging.availability");
  expect_error("[scavenging]\nmean_up_seconds = \"1h\"\n", "scavenging.mean_up_seconds: expected a number");
  expect_error("[scavenging]\nnotice_seconds = -1\n", "scavenging.notice_seconds");
  expect_error("[scavenging]\nquorum = 0\n", "scavenging.quorum");
  expect_error("scavenging = 3\n", "scavenging: expected a table");

  testing::TempDir dir;
  std::ofstream(dir.file("spot.csv")) << "0,600,60\n1,600,60\n1,oops,60\n";
  std::ofstream(dir.file("two.csv")) << "0,600,60\n1,600,60\n";
  const auto load = [&](const std::string& body) {
    std::ofstream(dir.file("plan.toml")) << body;
    return load_simulation_plan(dir.file("plan.toml"));
  };
  const auto refused = [&](const std::string& body, const std::vector<std::string>& wanted) {
    auto p = load(body);
    BOOST_REQUIRE_MESSAGE(!p.ok(), "accepted: " << body);
    for (const auto& w : wanted)
      BOOST_CHECK_MESSAGE(p.status().message().find(w) != std::string_view::npos,
                          "wanted '" << w << "' in: " << p.status().to_string());
  };
  // The plan's line and key, then the trace's file and line.
  refused("[scavenging]\n\ntrace = \"spot.csv\"\n",
          {"plan.toml:3: scavenging.trace: ", "spot.csv:3: up_seconds 'oops'"});
  refused("[scavenging]\ntrace = \"none.csv\"\n", {"plan.toml:2: scavenging.trace: ", "none.csv"});
  refused("[scavenging]\navailability = 0.5\ntrace = \"two.csv\"\n", {"plan.toml:3: scavenging.trace", "availability"});
  refused("[scavenging]\nscavenged = [1, 4]\ntrace = \"two.csv\"\n",
          {"plan.toml:2: scavenging.scavenged", "4 scavenged learners, and the trace has 2"});
  BOOST_CHECK(load("[scavenging]\nscavenged = [0, 2]\ntrace = \"two.csv\"\n").ok());
}

BOOST_AUTO_TEST_CASE(a_trace_parses_and_a_bad_row_is_refused_naming_its_line) {
  auto t = parse_availability_trace("learner,up_seconds,down_seconds\n0,10,20\n1,5,5,0 # vanishes\n0,30,40\n", "t.csv");
  BOOST_REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  BOOST_REQUIRE_EQUAL(t->size(), 2u);
  BOOST_CHECK_EQUAL((*t)[0].size(), 2u);
  BOOST_CHECK_EQUAL((*t)[0][1].up_seconds, 30.0);
  BOOST_CHECK_EQUAL((*t)[1][0].notice_seconds, 0.0);
  const auto refused = [](const std::string& text, const std::string& wanted) {
    auto r = parse_availability_trace(text, "t.csv");
    BOOST_REQUIRE_MESSAGE(!r.ok(), "accepted: " << text);
    BOOST_CHECK_MESSAGE(r.status().message().find(wanted) != std::string_view::npos,
                        "wanted '" << wanted << "' in: " << r.status().to_string());
  };
  refused("0,10,10\n2,10,10\n", "t.csv:2: learner 2 before learner 1");
  refused("0,10,10\n\n0,10\n", "t.csv:3: 2 fields");
  refused("0,10,10,1,1\n", "t.csv:1: 5 fields");
  refused("0,10,-1\n", "t.csv:1: down_seconds '-1'");
  refused("0,1h,10\n", "t.csv:1: up_seconds '1h'");
  refused("0,10,10,nan\n", "t.csv:1: notice_seconds 'nan'");
  refused("# a comment\n0,0,0\n", "t.csv:2: up_seconds and down_seconds are both 0");
  refused("1.5,10,10\n", "t.csv:1: learner '1.5'");
  refused("0,10,10\nlearner,up_seconds,down_seconds\n", "t.csv:2: learner 'learner'");  // a header only comes first
  refused("# nothing\n\n", "t.csv: no rows");
}

// No scavenged learner: the same cell as the core's learners alone, draw for
// draw (a core that does fail, so there is something to compare).
BOOST_AUTO_TEST_CASE(scavenged_zero_is_the_core_alone) {
  SimulationPlan p = must(kScavenging);
  p.failures.mtbi_chip_years = 1.0;
  p.failures.slice_chips = 1024;
  p.scavenging->learner_chips = 4096;
  const CellResult alone = scavenge(p, 0);
  const CellResult plain = simulate(p, Mode::kDecoupled, 2, 8192);
  BOOST_CHECK_GT(alone.interruptions, 10u);
  BOOST_CHECK_EQUAL(alone.events, plain.events);
  BOOST_CHECK_EQUAL(alone.rounds, plain.rounds);
  BOOST_CHECK_EQUAL(alone.interruptions, plain.interruptions);
  BOOST_CHECK_CLOSE(alone.goodput, plain.goodput, 1e-6);  // allocated time: the core's figure against M x time
  BOOST_CHECK_CLOSE(alone.allocated_learners, 2.0, 1e-6);
  BOOST_CHECK_EQUAL(alone.joins + alone.departures + alone.vanished, 0u);
}

// Machines that are always up: every scavenged learner joins once and trains
// beside the core, so the run merges (core + k) / core times the core's work,
// at the core's goodput (stragglers and all).
BOOST_AUTO_TEST_CASE(learners_always_up_multiply_the_cores_work) {
  SimulationPlan p = must(kScavenging);
  p.training.step_jitter = 0.3;
  p.scavenging->availability = 1.0;
  const CellResult alone = scavenge(p, 0);
  for (int k : {1, 4}) {
    const CellResult r = scavenge(p, k);
    const double expected = (2.0 + k) / 2.0;
    BOOST_CHECK_CLOSE(r.merged_learners / alone.merged_learners, expected, 1.0);
    BOOST_CHECK_CLOSE(r.allocated_learners, 2.0 + k, 0.1);
    BOOST_CHECK_LE(std::abs(r.goodput - alone.goodput),
                   std::max(0.005, 2.0 * (r.goodput_halfwidth + alone.goodput_halfwidth)));
    BOOST_CHECK_EQUAL(r.departures + r.vanished + r.released + r.claims_refused, 0u);
    BOOST_CHECK_LE(r.join_seconds_max, 4 * p.training.latency_seconds + 1e-9);  // claim, slot, Register, Welcome
  }
}

// Departures with notice are orderly: each leaver's last progress is merged
// before its Done, so what the scavenged learners trained is what the run
// merged, and goodput stays the core's. Without notice they vanish: failures,
// their slots held a while, their unpushed steps lost.
BOOST_AUTO_TEST_CASE(orderly_departures_leave_no_trained_work_unmerged) {
  SimulationPlan p = must(kScavenging);
  p.scavenging->availability = 0.5;
  p.scavenging->mean_up_seconds = 1800;
  p.scavenging->notice_seconds = 30;
  const int k = 4;
  const CellResult notice = scavenge(p, k);
  BOOST_CHECK_GT(notice.departures, 100u);
  BOOST_CHECK_LE(std::abs(double(notice.departures) - double(notice.joins)), double(k));  // every join left in order
  BOOST_CHECK_EQUAL(notice.vanished + notice.released + notice.cut_short, 0u);
  BOOST_CHECK_GE(notice.merged_learners, 0.995 * notice.trained_learners);
  BOOST_CHECK_GE(notice.goodput, 0.99);
  BOOST_CHECK_CLOSE(notice.allocated_learners, 2.0 + k * 0.5, 10.0);  // availability 0.5, plus the joins' few seconds

  p.scavenging->notice_seconds = 0;
  const CellResult vanish = scavenge(p, k);
  BOOST_CHECK_GT(vanish.vanished, 100u);
  BOOST_CHECK_EQUAL(vanish.departures, 0u);
  BOOST_CHECK_GT(vanish.released, 100u);  // each vanished learner's slot, after its hold
  BOOST_CHECK_LT(vanish.merged_learners, 0.995 * vanish.trained_learners);
  BOOST_CHECK_LT(vanish.goodput, notice.goodput - 0.005);
}

// A trace says when each machine is up: learner 0 is up 1000 s and gone
// 1000 s without notice; learner 1 starts down and is up 1500 s of every 2500.
BOOST_AUTO_TEST_CASE(a_trace_drives_the_comings_and_goings) {
  SimulationPlan p = must(kScavenging);
  auto trace = parse_availability_trace("0,1000,1000,0\n1,0,500\n1,1500,500\n", "t.csv");
  BOOST_REQUIRE(trace.ok());
  p.scavenging->trace = *trace;
  const CellResult r = scavenge(p, 2);
  const double h = r.measured_hours;
  BOOST_CHECK_CLOSE(double(r.vanished) / h, 1.8, 3.0);
  BOOST_CHECK_CLOSE(double(r.departures) / h, 3600.0 / 2500.0, 3.0);
  BOOST_CHECK_CLOSE(double(r.joins) / h, 1.8 + 3600.0 / 2500.0, 3.0);
  // Up 1/2 and 3/5 of the time; a vanished learner's slot is held 60 s more.
  BOOST_CHECK_CLOSE(r.allocated_learners, 2.0 + 0.5 + 0.6 + 1.8 * 60.0 / 3600.0, 2.0);
}

BOOST_AUTO_TEST_CASE(the_report_has_a_scavenging_table_and_the_core_alone_when_no_row_is_it) {
  SimulationPlan p = must(kScavenging);
  p.max_hours = 50;
  p.scavenging->scavenged = {2};
  p.scavenging->availability = 1.0;
  auto r = run_simulation(p);
  BOOST_REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  BOOST_REQUIRE_EQUAL(r->scavenging.size(), 1u);
  BOOST_REQUIRE(r->scavenging_core);
  BOOST_CHECK_EQUAL(r->scavenging_core->cell.scavenged, 0);
  BOOST_CHECK_CLOSE(r->scavenging[0].speedup, 2.0, 1.0);
  BOOST_CHECK_CLOSE(r->scavenging[0].tokens_speedup, 2.0, 1.0);
  BOOST_CHECK_GT(r->scavenging[0].speedup_halfwidth, 0.0);
  const std::string json = simulation_json(p, *r);
  BOOST_CHECK(json.find("\"scavenging\":{\"core\":2,\"quorum\":1,") != std::string::npos);
  BOOST_CHECK(json.find("\"rows\":[{\"scavenged\":2,\"goodput\":") != std::string::npos);
  BOOST_CHECK(json.find("\"core_alone\":{\"scavenged\":0,") != std::string::npos);
  const std::string table = simulation_table(p, *r);
  BOOST_CHECK(table.find("speed-up") != std::string::npos);
  BOOST_CHECK(table.find("\n2 ") != std::string::npos);  // the row of 2 scavenged learners
  BOOST_CHECK(table.find("2.00x") != std::string::npos);
}

// Links: a plan of 4 learners on one link each, no failures.
constexpr const char* kLinked = R"(
max_hours = 0.2
precision = 0.01
[failures]
mtbi_chip_years = 1000000
[training]
step_seconds = 0.5
parameters = 100000
set = ["outer.sync_every=12", "outer.fragments=4", "outer.overlap=2"]
[network]
link = "rate=100mbit,delay=20ms"
wire_parameters = 1000000
[grid]
modes = ["dp", "decoupled"]
chips = [4]
learners = [4]
)";

// dp exchanges through the syncer: each member's fp32 gradient up, the fp32
// parameters down, each paced at the rate behind the delay. The hub is
// unlimited, so a step takes T + 2 (4 N 8 / rate + delay).
BOOST_AUTO_TEST_CASE(dp_over_links_waits_for_its_exchange_as_the_closed_form_says) {
  const SimulationPlan p = must(kLinked);
  BOOST_TEST(p.network.given);
  BOOST_TEST(p.cells.size() == 2u);
  const CellResult r = simulate(p, Mode::kDp, 4, 4);
  const double exchange = 2 * (4e6 * 8 / 100e6 + 0.02), closed = 0.5 / (0.5 + exchange);
  BOOST_TEST_MESSAGE("dp over 100 Mbit/s: utilization " << r.utilization << ", closed form " << closed);
  BOOST_CHECK_LE(std::abs(r.utilization - closed), 0.005);
  BOOST_TEST(r.on_time == r.utilization);
  // A faster link, a smaller wait.
  SimulationPlan fast = p;
  fast.network.link = *parse_link_shape("rate=10gbit,delay=20ms");
  BOOST_CHECK_GT(simulate(fast, Mode::kDp, 4, 4).utilization, r.utilization + 0.2);
}

// Decoupled learners never wait: the link only makes broadcasts late. On a
// link too slow for a fragment to come back within tau steps, on_time says
// what waiting for them would cost.
BOOST_AUTO_TEST_CASE(decoupled_over_links_trains_on_and_on_time_counts_late_broadcasts) {
  SimulationPlan p = must(kLinked);
  const CellResult fine = simulate(p, Mode::kDecoupled, 4, 4);
  BOOST_TEST(fine.utilization == 1.0, boost::test_tools::tolerance(1e-3));  // but the step under way at the end
  BOOST_CHECK_GT(fine.on_time, 0.97);
  BOOST_CHECK_GT(fine.goodput, 0.95);
  p.network.link = *parse_link_shape("rate=2mbit,delay=20ms");  // a 1M-parameter int4 fragment: ~0.5 s each way
  const CellResult slow = simulate(p, Mode::kDecoupled, 4, 4);
  BOOST_TEST_MESSAGE("on time: " << fine.on_time << " at 100 Mbit/s, " << slow.on_time << " at 2 Mbit/s");
  BOOST_TEST(slow.utilization == 1.0, boost::test_tools::tolerance(1e-3));
  BOOST_CHECK_LT(slow.on_time, fine.on_time - 0.05);
}

// A link just fast enough: a 250k-value int4 fragment (1.125 Mbit) crosses
// 1.5 Mbit/s in 0.75 s, and each learner pushes one every 1.5 s, so its link
// is busy half the time with the pushes due and all of it if each went twice.
// A pull that reaches a learner while its own push is on the way is answered
// by that push, and progress carried over a version it missed waits for its
// next regular push: rounds stay as due, and no push crosses a link for nothing.
BOOST_AUTO_TEST_CASE(near_the_threshold_rounds_stay_as_due_and_no_push_crosses_twice) {
  SimulationPlan p = must(kLinked);
  p.network.link = *parse_link_shape("rate=1.5mbit,delay=20ms");
  const CellResult r = simulate(p, Mode::kDecoupled, 4, 4);
  const double due = 4 * r.simulated_hours * 3600 / (12 * 0.5);  // each of 4 fragments every H steps of T
  BOOST_TEST_MESSAGE("at 1.5 Mbit/s: " << r.rounds << " rounds (" << due << " due), " << r.merged_pushes
                                       << " pushes merged, " << r.late_pushes << " late, goodput " << r.goodput);
  BOOST_CHECK_LE(double(r.rounds), 1.02 * due);
  BOOST_CHECK_GE(double(r.rounds), 0.95 * due);  // a merged learner keeps its cadence: H steps from push to push
  BOOST_CHECK_LE(double(r.late_pushes), 0.05 * double(r.merged_pushes));
  BOOST_CHECK_GT(r.goodput, 0.95);
}

// Streaming DiLoCo's 100B workload (a step of 4.9 s, H = 100, 36 fragments,
// int4 both ways: 12.5 Gbit a push or broadcast), 4 learners each on a link of `rate`.
SimulationPlan hundred_b(const std::string& rate, double hours) {
  SimulationPlan p = must(R"(
precision = 0.5
[failures]
mtbi_chip_years = 1000000
[training]
step_seconds = 4.9
set = ["outer.sync_every=100", "outer.overlap=2", "outer.push_codec=int4", "outer.broadcast_codec=int4",
       "outer.fragments=36"]
[network]
wire_parameters = 100e9
[grid]
modes = ["decoupled"]
chips = [4]
learners = [4]
)");
  p.network.link = *parse_link_shape("rate=" + rate);
  p.max_hours = hours;
  return p;
}

// The 100B workload on 1 Gbit/s links: each is
// busy 92% of the time each way with the pushes and broadcasts due, and a
// broadcast waits behind others for longer than a few steps. That is a
// queue, not a lost version: the syncer measures how long its broadcasts
// take to be adopted and sends no repair (the fragment whole, in fp32)
// within twice that. Repairs there once stormed (200k in 8 hours, goodput 0.07).
BOOST_AUTO_TEST_CASE(a_queue_of_broadcasts_on_a_busy_link_is_not_repaired) {
  const SimulationPlan p = hundred_b("1gbit", 8);
  const CellResult r = simulate(p, Mode::kDecoupled, 4, 4);
  BOOST_TEST_MESSAGE("100B at 1 Gbit/s: " << r.rounds << " rounds, " << r.repairs << " repairs, " << r.late_pushes
                                          << " late, goodput " << r.goodput);
  BOOST_CHECK_EQUAL(r.repairs, 0u);
  BOOST_CHECK_GT(r.goodput, 0.95);
}

// The same 100B workload at 2.4 Gbit/s: a 3-layer fragment (12.5 Gbit)
// crosses in 5.2 s, up then down is 10.4 s, more than tau = 2 steps (9.8 s),
// so a learner that waited for its broadcasts would lose about 4% of its time.
// Streamed as 12 fragments back to back, each piece's round merges once its
// pushes are in and its broadcast comes down while the next piece goes up:
// up and down take about 13/12 of one crossing, 5.6 s, and nothing is late.
// The pieces of different learners reach the syncer side by side; a hub that
// took them in the order they were sent, not the order they arrived, queued
// every learner's first piece behind another's last, and streaming gained nothing.
BOOST_AUTO_TEST_CASE(streamed_fragments_cross_a_link_about_once_not_twice) {
  SimulationPlan p = hundred_b("2.4gbit", 2);
  p.network.wait_late = true;
  const CellResult whole = simulate(p, Mode::kDecoupled, 4, 4);
  p.training.outer.fragments = 36 * 12;
  p.training.outer.stream = 12;
  const CellResult streamed = simulate(p, Mode::kDecoupled, 4, 4);
  BOOST_TEST_MESSAGE("100B at 2.4 Gbit/s, learners waiting for late broadcasts: utilization "
                     << whole.utilization << " whole, " << streamed.utilization << " streamed; rounds "
                     << whole.rounds << " and " << streamed.rounds);
  BOOST_CHECK_LT(whole.utilization, 0.98);
  BOOST_CHECK_GT(streamed.utilization, 0.995);
  // The same pushes, in 12 times as many rounds: none lost or late for it.
  BOOST_CHECK_GE(double(streamed.rounds), 0.98 * 12 * double(whole.rounds));
  BOOST_CHECK_EQUAL(streamed.late_pushes, 0u);
}

// A partition loses what its learners send and are sent meanwhile; the
// syncer merges without them, and they come back when it is over.
BOOST_AUTO_TEST_CASE(a_partition_cuts_its_learners_off_for_a_while) {
  SimulationPlan p = must(std::string(kLinked) + R"(
[[network.partition]]
learners = [0, 1]
at_seconds = 200
seconds = 60
)");
  const CellResult cut = simulate(p, Mode::kDecoupled, 4, 4);
  p.network.partitions.clear();
  const CellResult whole = simulate(p, Mode::kDecoupled, 4, 4);
  BOOST_TEST_MESSAGE("goodput " << cut.goodput << " with a partition, " << whole.goodput << " without; lost "
                                << cut.lost_to_partition);
  BOOST_CHECK_GT(cut.lost_to_partition, 0u);
  BOOST_TEST(whole.lost_to_partition == 0u);
  BOOST_CHECK_GT(cut.rounds, 0u);
  // dp cannot step while a member is cut off: 100 s of the ~650 measured, at ~42% utilization.
  SimulationPlan dp = must(std::string(kLinked) + R"(
[[network.partition]]
learners = [3]
at_seconds = 100
seconds = 100
)");
  BOOST_CHECK_LT(simulate(dp, Mode::kDp, 4, 4).utilization, simulate(p, Mode::kDp, 4, 4).utilization - 0.04);
}

BOOST_AUTO_TEST_CASE(a_bad_network_names_the_key) {
  expect_error(std::string(kQuiet) + "[network]\nlink = \"rate=fast\"\n", "network.link");
  expect_error(std::string(kQuiet) + "[network]\nlinks = \"rate=1gbit\"\n", "network.links");
  expect_error(std::string(kQuiet) + "[[network.region]]\nlearners = [0]\n", "network.region[0].link");
  expect_error(std::string(kQuiet) + "[[network.partition]]\nlearners = [0]\n", "network.partition[0].seconds");
  expect_error(R"(
[training.compute]
parameters = 1e9
tokens_per_step = 1e6
[grid]
chips = [8]
)", "training.compute.peak_flops");
}

// Compute as a model: 6 N FLOPs per token at the stated MFU.
BOOST_AUTO_TEST_CASE(a_step_can_be_given_as_flops) {
  const SimulationPlan p = must(R"(
[training.compute]
parameters = 1e9
tokens_per_step = 1e6
chips = 100
peak_flops = 1e15
mfu = 0.6
[grid]
chips = [8]
)");
  BOOST_TEST(p.training.step_seconds == 6e9 * 1e6 / (100 * 1e15 * 0.6), boost::test_tools::tolerance(1e-12));
}

// [utilization]: rows per model, method and target; the published cells
// beside them; decoupled found by the simulator, and monotone in the target.
BOOST_AUTO_TEST_CASE(a_utilization_plan_finds_the_bandwidth_each_method_needs) {
  const SimulationPlan p = must(R"(
[training]
set = ["outer.sync_every=100", "outer.overlap=2"]
[utilization]
targets = [0.5, 0.9]
methods = ["dp", "diloco", "decoupled"]
at_gbps = [1]
periods = 5
[[utilization.model]]
name = "1B"
parameters = 1e9
layers = 24
step_seconds = 0.1
[[utilization.reference]]
model = "1B"
method = "dp"
gbps = [86.8, 184.2]
)");
  BOOST_REQUIRE(p.utilization);
  auto report = run_simulation(p);
  BOOST_REQUIRE_MESSAGE(report.ok(), report.status().to_string());
  const auto& rows = report->utilization;
  BOOST_REQUIRE_EQUAL(rows.size(), 6u);
  for (const auto& r : rows) {
    BOOST_TEST_MESSAGE(r.model << " " << r.method << " " << r.target << ": "
                                << (r.bits_per_second ? *r.bits_per_second / 1e9 : -1) << " Gbit/s");
    BOOST_REQUIRE(r.bits_per_second.has_value());
  }
  // dp's published cells, within one step of the grid.
  BOOST_TEST(rows[0].paper_gbps.value() == 86.8);
  BOOST_CHECK_LE(std::abs(rows[0].grid_steps_off), 1);
  BOOST_CHECK_LE(std::abs(rows[1].grid_steps_off), 1);
  // A higher target never needs less; decoupled (int4 fragments, overlapped) needs far less than dp.
  for (size_t i = 0; i < rows.size(); i += 2) BOOST_CHECK_LE(*rows[i].bits_per_second, *rows[i + 1].bits_per_second);
  BOOST_CHECK_LT(*rows[5].bits_per_second * 20, *rows[1].bits_per_second);
  BOOST_REQUIRE_EQUAL(report->utilization_at.size(), 3u);  // at 1 Gbit/s, each method
  BOOST_CHECK_LT(report->utilization_at[0].utilization, 0.2);  // dp at 1 Gbit/s
  const std::string json = simulation_json(p, *report);
  BOOST_TEST(json.find("\"method\":\"decoupled\"") != std::string::npos);
  BOOST_TEST(json.find("\"paper_gbps\":86.8") != std::string::npos);
  // One model, 1B of 24 layers, for the bad plans below.
  const std::string one_model = "[[utilization.model]]\nname = \"1B\"\nparameters = 1e9\nlayers = 24\nstep_seconds = 0.1\n";
  expect_error("[utilization]\nmethods = [\"ring\"]\n" + one_model, "utilization.methods[0]");
  expect_error(R"(
[[utilization.model]]
name = "x"
parameters = 1e9
layers = 25
step_seconds = 0.1
)", "utilization.model[0].layers");
  expect_error(one_model + "[[utilization.reference]]\nmodel = \"2B\"\nmethod = \"dp\"\ngbps = [1, 2, 3, 4, 5]\n",
               "utilization.reference[0].model");
  expect_error("[utilization]\nvariants = {fast = [\"inner.lr=1\"]}\n" + one_model, "utilization.variants.fast[0]");
  expect_error("[utilization]\nvariants = {dp = [\"outer.stream=2\"]}\n" + one_model, "utilization.variants.dp");
  expect_error("[utilization]\nvariants = {s = [\"outer.stream=0\"]}\n" + one_model, "outer.stream");
}

// A variant is decoupled with its own [outer] keys on top of training.set,
// and a row of its own: streamed fragments need less bandwidth, never more.
BOOST_AUTO_TEST_CASE(a_utilization_variant_is_a_row_of_decoupled_with_its_own_settings) {
  const SimulationPlan p = must(R"(
[training]
set = ["outer.sync_every=100", "outer.overlap=2", "outer.push_codec=int4", "outer.broadcast_codec=int4"]
[utilization]
targets = [0.99]
methods = ["decoupled", "streamed"]
variants = {streamed = ["outer.stream=12"]}
periods = 5
[[utilization.model]]
name = "10B"
parameters = 10e9
layers = 48
step_seconds = 0.8
)");
  BOOST_REQUIRE(p.utilization);
  BOOST_REQUIRE_EQUAL(p.utilization->variants.size(), 1u);
  BOOST_CHECK_EQUAL(p.utilization->variants[0].outer.stream, 12);
  BOOST_CHECK_EQUAL(p.utilization->variants[0].outer.sync_every, 100);  // training.set still holds
  auto report = run_simulation(p);
  BOOST_REQUIRE_MESSAGE(report.ok(), report.status().to_string());
  const auto& rows = report->utilization;
  BOOST_REQUIRE_EQUAL(rows.size(), 2u);
  BOOST_REQUIRE(rows[0].bits_per_second && rows[1].bits_per_second);
  BOOST_TEST_MESSAGE("10B at 99%: " << *rows[0].bits_per_second / 1e9 << " Gbit/s whole, "
                                    << *rows[1].bits_per_second / 1e9 << " streamed");
  BOOST_CHECK_EQUAL(rows[1].method, "streamed");
  BOOST_CHECK_LT(*rows[1].bits_per_second, 0.75 * *rows[0].bits_per_second);
}

// Streaming DiLoCo's Table 4 as examples/simulate/table4.toml states it:
// every published dp and DiLoCo cell within one step of the grid.
BOOST_AUTO_TEST_CASE(the_table4_plan_reproduces_the_published_dp_and_diloco_rows) {
  auto plan = load_simulation_plan(std::string(ATOLL_SOURCE_DIR) + "/examples/simulate/table4.toml",
                                   {"utilization.methods=[\"dp\", \"diloco\"]"});
  BOOST_REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  auto report = run_simulation(*plan);
  BOOST_REQUIRE_MESSAGE(report.ok(), report.status().to_string());
  BOOST_REQUIRE_EQUAL(report->utilization.size(), 30u);
  for (const auto& r : report->utilization) {
    BOOST_REQUIRE(r.paper_gbps && r.bits_per_second);
    BOOST_CHECK_MESSAGE(std::abs(r.grid_steps_off) <= 1, r.model << " " << r.method << " at " << r.target << ": "
                                                                   << *r.bits_per_second / 1e9 << " Gbit/s against "
                                                                   << *r.paper_gbps);
  }
}

// Every example plan with links loads.
BOOST_AUTO_TEST_CASE(the_example_plans_with_links_load) {
  for (const char* name : {"wan_bench", "table4", "seeds_claims", "partition"}) {
    auto plan = load_simulation_plan(std::string(ATOLL_SOURCE_DIR) + "/examples/simulate/" + name + ".toml");
    BOOST_CHECK_MESSAGE(plan.ok(), name << ": " << plan.status().to_string());
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
