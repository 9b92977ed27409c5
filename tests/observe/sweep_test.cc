// The sweep's plan and records: grids expand to every combination, records
// round-trip through their files, summaries give mean and spread.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <fstream>
#include <limits>

#include "atoll/sweep.h"
#include "test_support.h"

namespace atl {

BOOST_AUTO_TEST_SUITE(sweep_test)

BOOST_AUTO_TEST_CASE(a_grid_axis_splits_at_top_level_commas_only) {
  auto a = parse_grid_axis("outer.lr = 0.3, 0.5,0.7");
  BOOST_REQUIRE(a.ok());
  BOOST_CHECK_EQUAL(a->key, "outer.lr");
  BOOST_CHECK((a->values == std::vector<std::string>{"0.3", "0.5", "0.7"}));
  auto l = parse_grid_axis("learners=[{speed=1.0},{speed=0.5}],[{speed=1.0}]");
  BOOST_REQUIRE(l.ok());
  BOOST_CHECK((l->values == std::vector<std::string>{"[{speed=1.0},{speed=0.5}]", "[{speed=1.0}]"}));
  for (const char* bad : {"outer.lr", "=1,2", "outer.lr=1,,2", "outer.lr=[1,2"}) {
    auto r = parse_grid_axis(bad);
    BOOST_CHECK_MESSAGE(!r.ok() && r.status().message().find("--grid") != std::string_view::npos, bad);
  }
}

BOOST_AUTO_TEST_CASE(grids_expand_to_every_combination_first_axis_slowest) {
  const auto v = expand_grid({{"a", {"1", "2"}}, {"b", {"x", "y", "z"}}});
  BOOST_REQUIRE_EQUAL(v.size(), 6u);
  BOOST_CHECK_EQUAL(v[0].label, "a=1 b=x");
  BOOST_CHECK_EQUAL(v[5].label, "a=2 b=z");
  BOOST_CHECK((v[4].overrides == std::vector<std::string>{"a=2", "b=y"}));
  BOOST_REQUIRE_EQUAL(expand_grid({}).size(), 1u);
  BOOST_CHECK(expand_grid({})[0].overrides.empty());
}

BOOST_AUTO_TEST_CASE(a_record_round_trips_and_resumes_only_its_own_trial) {
  testing::TempDir dir;
  const Trial trial{{"outer.lr=0.5", {"outer.lr=0.5"}}, 3};
  Report report;
  report.wall_seconds = 12.5;
  report.tokens = 1000;
  report.eval.loss = 1.5;
  report.eval.bits_per_byte = 2.164;
  report.eval.bits_per_byte_stderr = 0.01;
  report.eval.windows = 2048;
  report.curve = {{5.0, 500, 2.0, 2.9, 0.4}, {12.5, 1000, 1.5, 2.164, 0.5}};
  const TrialRecord record = TrialRecord::of(trial, report);
  BOOST_REQUIRE(save_record(dir.path(), trial, record).ok());
  auto back = load_record(dir.path(), trial);
  BOOST_REQUIRE(back.ok() && back->has_value());
  BOOST_CHECK_EQUAL((*back)->label, "outer.lr=0.5");
  BOOST_CHECK_EQUAL((*back)->seed, 3u);
  BOOST_CHECK((*back)->ok);
  BOOST_CHECK_CLOSE((*back)->bits_per_byte, 2.164, 1e-9);
  BOOST_CHECK_EQUAL((*back)->windows, 2048);
  BOOST_REQUIRE_EQUAL((*back)->curve.size(), 2u);
  BOOST_CHECK_CLOSE(*(*back)->quality_at_seconds(8.75), (2.9 + 2.164) / 2, 1e-9);  // halfway
  BOOST_CHECK(!(*back)->quality_at_seconds(1.0));  // before the curve's first point
  // Tokens to reach a quality: between the points, at the first, or never.
  BOOST_CHECK_CLOSE(*(*back)->tokens_to_reach((2.9 + 2.164) / 2), 750.0, 1e-6);
  BOOST_CHECK_CLOSE(*(*back)->tokens_to_reach(3.5), 500.0, 1e-9);
  BOOST_CHECK(!(*back)->tokens_to_reach(2.0));
  // Another seed, or another topology, is another trial.
  auto other = load_record(dir.path(), Trial{{"outer.lr=0.5", {"outer.lr=0.5"}}, 4});
  BOOST_REQUIRE(other.ok());
  BOOST_CHECK(!other->has_value());
  Trial edited = trial;
  edited.topology_hash = stable_hash("tokens = 2000");
  BOOST_CHECK_NE(edited.id(), trial.id());
  auto moved = load_record(dir.path(), edited);
  BOOST_REQUIRE(moved.ok());
  BOOST_CHECK(!moved->has_value());
  // A damaged record is an error naming its file.
  std::ofstream(dir.file(trial.id() + ".toml")) << "label = [";
  auto damaged = load_record(dir.path(), trial);
  BOOST_REQUIRE(!damaged.ok());
  BOOST_CHECK(damaged.status().message().find(trial.id()) != std::string_view::npos);
}

BOOST_AUTO_TEST_CASE(a_record_prints_each_float_short_and_reads_it_back_exactly) {
  const Trial trial{{"inner.lr=3e-3", {"inner.lr=3e-3"}}, 1};
  Report report;
  report.wall_seconds = 527.573;
  report.tokens = 9602048;
  report.eval.loss = 0.1 + 0.2;  // 0.30000000000000004: its shortest form needs all 17 digits
  report.eval.bits_per_byte = 1.726592279272231;
  const TrialRecord record = TrialRecord::of(trial, report);
  const std::string text = record.to_toml();
  BOOST_CHECK_NE(text.find("wall_seconds = 527.573\n"), std::string::npos);
  BOOST_CHECK_NE(text.find("loss = 0.30000000000000004\n"), std::string::npos);
  BOOST_CHECK_NE(text.find("# one trial of `atoll sweep`: inner.lr=3e-3, seed 1\n"), std::string::npos);  // comments as written
  BOOST_CHECK_NE(text.find("bits_per_byte = 1.726592279272231\n"), std::string::npos);
  BOOST_CHECK_EQUAL(text.find("99999999"), std::string::npos);  // toml++ alone: 527.57299999999998
  auto back = TrialRecord::parse_toml(text, "record.toml");
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK_EQUAL(back->wall_seconds, report.wall_seconds);  // exactly
  BOOST_CHECK_EQUAL(back->loss, report.eval.loss);
  BOOST_CHECK_EQUAL(back->bits_per_byte, report.eval.bits_per_byte);
  BOOST_CHECK_EQUAL(back->label, "inner.lr=3e-3");
}

BOOST_AUTO_TEST_CASE(a_run_that_shared_its_machine_is_named) {
  testing::TempDir dir;
  Report report;
  report.eval.loss = 1.5;
  report.eval.bits_per_byte = 2.0;
  report.hardware.others_cpu = 0.08;
  report.hardware.steal = 0.04;
  const Trial busy{{"decoupled", {}}, 1}, clean{{"decoupled", {}}, 2}, old{{"decoupled", {}}, 3};
  BOOST_REQUIRE(save_record(dir.path(), busy, TrialRecord::of(busy, report)).ok());
  report.hardware.others_cpu = 0.05;
  report.hardware.steal = 0.0;
  BOOST_REQUIRE(save_record(dir.path(), clean, TrialRecord::of(clean, report)).ok());
  report.hardware.others_cpu = report.hardware.steal = std::numeric_limits<double>::quiet_NaN();
  BOOST_REQUIRE(save_record(dir.path(), old, TrialRecord::of(old, report)).ok());  // not measured
  std::vector<TrialRecord> records;
  for (const Trial& t : {busy, clean, old}) {
    auto back = load_record(dir.path(), t);
    BOOST_REQUIRE(back.ok() && back->has_value());
    records.push_back(**back);
  }
  BOOST_CHECK_CLOSE(records[0].others_cpu, 0.08, 1e-9);
  BOOST_CHECK_CLOSE(records[0].steal, 0.04, 1e-9);
  BOOST_CHECK(std::isnan(records[2].others_cpu));
  // 8% + 4% is more than a tenth of the machine; 5% is not; an unmeasured run is not named.
  BOOST_CHECK(records[0].shared_machine() && !records[1].shared_machine() && !records[2].shared_machine());
  const std::string line = shared_machine_line(records);
  BOOST_CHECK_NE(line.find("decoupled, seed 1 (8% others, 4% steal)"), std::string::npos);
  BOOST_CHECK_EQUAL(line.find("seed 2"), std::string::npos);
  const std::string table = sweep_table(summarize({{"decoupled", {}}}, records));
  BOOST_CHECK_NE(table.find(line), std::string::npos);
  BOOST_CHECK_EQUAL(shared_machine_line({records[1], records[2]}), "");
}

BOOST_AUTO_TEST_CASE(a_record_keeps_its_paced_and_late_steps_and_the_table_names_runs_that_ran_late) {
  testing::TempDir dir;
  Report report;
  report.eval.loss = 1.5;
  report.eval.bits_per_byte = 2.0;
  report.hardware.paced_steps = 1000;
  report.hardware.late_steps = 350;
  const Trial late{{"decoupled", {}}, 1}, paced{{"decoupled", {}}, 2}, shared{{"decoupled", {}}, 3};
  BOOST_REQUIRE(save_record(dir.path(), late, TrialRecord::of(late, report)).ok());
  report.hardware.late_steps = 100;
  BOOST_REQUIRE(save_record(dir.path(), paced, TrialRecord::of(paced, report)).ok());
  report.hardware.paced_steps = report.hardware.late_steps = 0;  // shared hardware: nothing paced
  BOOST_REQUIRE(save_record(dir.path(), shared, TrialRecord::of(shared, report)).ok());
  std::vector<TrialRecord> records;
  for (const Trial& t : {late, paced, shared}) {
    auto back = load_record(dir.path(), t);
    BOOST_REQUIRE(back.ok() && back->has_value());
    records.push_back(**back);
  }
  BOOST_CHECK_EQUAL(records[0].paced_steps, 1000u);
  BOOST_CHECK_EQUAL(records[0].late_steps, 350u);
  // 35% is more than a fifth; 10% is not; an unpaced run is not named.
  BOOST_CHECK(records[0].late_pace() && !records[1].late_pace() && !records[2].late_pace());
  const std::string line = late_pace_line(records);
  BOOST_CHECK_NE(line.find("decoupled, seed 1 (35% late)"), std::string::npos);
  BOOST_CHECK_EQUAL(line.find("seed 2"), std::string::npos);
  BOOST_CHECK_NE(sweep_table(summarize({{"decoupled", {}}}, records)).find(line), std::string::npos);
  BOOST_CHECK_EQUAL(late_pace_line({records[1], records[2]}), "");
  TrialRecord long_label = records[0];  // a long variant label is named whole, never cut short
  long_label.label = std::string(200, 'x');
  BOOST_CHECK_NE(late_pace_line({long_label}).find(long_label.label + ", seed 1 (35% late)"), std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_summary_gives_mean_and_spread_over_seeds_best_first) {
  const std::vector<Variant> variants = {{"slow", {"x=1"}}, {"fast", {"x=2"}}};
  std::vector<TrialRecord> records;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    for (int v = 0; v < 2; ++v) {
      TrialRecord r = TrialRecord::failed(Trial{variants[size_t(v)], seed}, "");
      r.ok = true;
      r.text = true;
      r.bits_per_byte = (v == 0 ? 3.0 : 2.0) + 0.1 * double(seed);
      r.loss = r.bits_per_byte * 0.693;
      records.push_back(r);
    }
  }
  records.push_back(TrialRecord::failed(Trial{variants[0], 4}, "the syncer gave up"));
  const auto rows = summarize(variants, records);
  BOOST_REQUIRE_EQUAL(rows.size(), 2u);
  BOOST_CHECK_EQUAL(rows[0].quality.n, 3);
  BOOST_CHECK_EQUAL(rows[0].failed, 1);
  BOOST_CHECK_CLOSE(rows[0].quality.mean, 3.2, 1e-9);
  BOOST_CHECK_CLOSE(rows[0].quality.stddev, 0.1, 1e-6);
  const std::string table = sweep_table(rows);
  BOOST_CHECK_LT(table.find("fast"), table.find("slow"));  // lower bits per byte first
  BOOST_CHECK(table.find("2.2000 +- 0.1000") != std::string::npos);
  const std::string json = sweep_json(rows, {"tokens=1000"}, "t.toml");
  BOOST_CHECK_LT(json.find("\"fast\""), json.find("\"slow\""));
  BOOST_CHECK(json.find("\"stddev\":0.1") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
