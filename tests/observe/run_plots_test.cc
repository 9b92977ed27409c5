// Run plots and the run's time series: CSVs that read back as written, SVGs
// with a line per series and a mark per fault, clear errors for bad files,
// and a RunWatch that keeps a long run's series bounded.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <fstream>
#include <string>

#include "atoll/file.h"
#include "atoll/run_plots.h"
#include "atoll/run_view.h"
#include "atoll/svg_chart.h"
#include "test_support.h"

namespace atl {
namespace {

RunSeries sample_series() {
  RunSeries s;
  s.mode = "decoupled";
  s.learners = 3;
  for (int i = 0; i < 20; ++i) {
    SeriesPoint p;
    p.seconds = 0.5 * i;
    p.tokens = 1000u * i;
    p.loss = i == 0 ? 0.0 : 2.0 / i;
    p.goodput = 0.9;
    p.alive = i >= 8 && i < 12 ? 2.0 / 3 : 1.0;
    p.versions_min = i;
    p.versions_max = i + 1;
    p.bytes_up = 100u * i;
    p.bytes_down = 10u * i;
    p.learner_steps = {10u * i, 9u * i, i >= 8 && i < 12 ? 80u : 8u * i};
    s.points.push_back(p);
  }
  s.events = {{4.0, "fault kill", 2, "inject kind=kill learner=2, recover_after=1 plan=\"p, q.toml\":3"},
              {4.1, "restart", -1, "recovered what=restart child=learner 2"},
              {5.9, "registration", 2, "recovered what=registration learner=2 seconds=1.9"}};
  return s;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string slurp(const std::string& path) {
  auto t = read_text(path);
  BOOST_REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  return *t;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(run_plots_test)

BOOST_AUTO_TEST_CASE(series_and_events_read_back_as_written) {
  testing::TempDir dir;
  const RunSeries s = sample_series();
  auto written = write_run_plots(dir.file("report"), s);
  BOOST_REQUIRE_MESSAGE(written.ok(), written.status().to_string());
  BOOST_CHECK_EQUAL(written->size(), 5u);
  auto back = read_run_series(dir.file("report"));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK_EQUAL(back->mode, "decoupled");
  BOOST_CHECK_EQUAL(back->learners, 3);
  BOOST_REQUIRE_EQUAL(back->points.size(), s.points.size());
  for (size_t i = 0; i < s.points.size(); ++i) {
    BOOST_CHECK_CLOSE(back->points[i].seconds + 1, s.points[i].seconds + 1, 1e-6);
    BOOST_CHECK_EQUAL(back->points[i].tokens, s.points[i].tokens);
    BOOST_CHECK_CLOSE(back->points[i].loss + 1, s.points[i].loss + 1, 1e-4);
    BOOST_CHECK(back->points[i].learner_steps == s.points[i].learner_steps);
  }
  BOOST_REQUIRE_EQUAL(back->events.size(), 3u);
  BOOST_CHECK_EQUAL(back->events[0].kind, "fault kill");
  BOOST_CHECK_EQUAL(back->events[0].learner, 2);
  BOOST_CHECK_EQUAL(back->events[0].text, s.events[0].text);  // commas and quotes and all
  // A file written before the text was quoted: the text is the rest of the line.
  std::ofstream(dir.file("report.events.csv")) << "seconds,kind,learner,text\n4.000,fault kill,2,inject a=1, b=2\n";
  auto old = read_run_series(dir.file("report"));
  BOOST_REQUIRE_MESSAGE(old.ok(), old.status().to_string());
  BOOST_CHECK_EQUAL(old->events.at(0).text, "inject a=1, b=2");
}

BOOST_AUTO_TEST_CASE(plots_have_a_line_per_series_and_a_mark_per_fault) {
  testing::TempDir dir;
  BOOST_REQUIRE(write_run_plots(dir.file("r"), sample_series()).ok());
  const std::string learners = slurp(dir.file("r.learners.svg"));
  BOOST_CHECK(learners.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  BOOST_CHECK_EQUAL(count(learners, "<polyline"), 4u);  // one per learner, and the learners present
  BOOST_CHECK_EQUAL(count(learners, "class=\"mark\""), 4u);  // the kill and the restart, on both charts
  BOOST_CHECK(learners.find(">kill 2</text>") != std::string::npos);
  const std::string loss = slurp(dir.file("r.loss.svg"));
  BOOST_CHECK_EQUAL(count(loss, "class=\"panel\""), 2u);  // against tokens and against time
  // The first point has no loss yet (0): left out, 19 of 20 drawn.
  const size_t first = loss.find("<polyline");
  const std::string points = loss.substr(first, loss.find("/>", first) - first);
  BOOST_CHECK_EQUAL(count(points, ","), 19u);
  const std::string goodput = slurp(dir.file("r.goodput.svg"));
  BOOST_CHECK_EQUAL(count(goodput, "<polyline"), 2u);  // goodput and alive
}

// Learners that join and leave: a learner's line is drawn only while it is
// a member, the members present are a chart of their own, and both read back.
BOOST_AUTO_TEST_CASE(a_learners_line_is_drawn_only_while_it_is_a_member) {
  testing::TempDir dir;
  RunSeries s = sample_series();
  for (size_t i = 0; i < s.points.size(); ++i) {
    SeriesPoint& p = s.points[i];
    const bool joined = i >= 5 && i < 15;  // learner 2 joins at point 5 and departs at 15
    p.learner_member = {true, true, joined};
    p.present = joined ? 3 : 2;
  }
  BOOST_REQUIRE(write_run_plots(dir.file("r"), s).ok());
  const std::string learners = slurp(dir.file("r.learners.svg"));
  BOOST_CHECK(learners.find("learners present") != std::string::npos);
  // Learners 0 and 1 one line each, learner 2 one line for its membership only, and the learners present.
  BOOST_CHECK_EQUAL(count(learners, "<polyline"), 4u);
  const auto back = read_run_series(dir.file("r"));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_REQUIRE_EQUAL(back->points.size(), s.points.size());
  for (size_t i = 0; i < s.points.size(); ++i) {
    BOOST_CHECK_EQUAL(back->points[i].present, s.points[i].present);
    BOOST_REQUIRE_EQUAL(back->points[i].learner_member.size(), 3u);
    BOOST_CHECK_EQUAL(back->points[i].learner_member[2], s.points[i].learner_member[2]);
  }
  // Twice a member (left, then back in its slot): two pieces of line, not one across the gap.
  for (size_t i = 0; i < s.points.size(); ++i) s.points[i].learner_member[2] = i < 5 || i >= 15;
  BOOST_REQUIRE(write_run_plots(dir.file("gap"), s).ok());
  BOOST_CHECK_EQUAL(count(slurp(dir.file("gap.learners.svg")), "<polyline"), 5u);
}

BOOST_AUTO_TEST_CASE(held_out_losses_an_evaluator_reported_are_a_line_of_their_own) {
  testing::TempDir dir;
  RunSeries s = sample_series();
  for (size_t i = 10; i < s.points.size(); ++i) s.points[i].eval_loss = 3.0 / static_cast<double>(i);
  BOOST_REQUIRE(write_run_plots(dir.file("r"), s).ok());
  auto back = read_run_series(dir.file("r"));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK(std::isnan(back->points[9].eval_loss));
  BOOST_CHECK_CLOSE(back->points[12].eval_loss, 0.25, 1e-4);
  const std::string loss = slurp(dir.file("r.loss.svg"));
  BOOST_CHECK_EQUAL(count(loss, "<polyline"), 4u);  // training and held-out, against tokens and time
  BOOST_CHECK(loss.find("held-out") != std::string::npos);
  // A series written before evaluators (no eval_loss column) still reads, without held-out losses.
  {
    std::ofstream out(dir.file("old.series.csv"));
    out << "seconds,tokens,loss,goodput,alive,versions_min,versions_max,bytes_up,bytes_down,steps_0\n"
        << "1,2,3,0.5,1,0,1,10,20,7\n";
    std::ofstream(dir.file("old.events.csv")) << "seconds,kind,learner,text\n";
  }
  auto old = read_run_series(dir.file("old"));
  BOOST_REQUIRE_MESSAGE(old.ok(), old.status().to_string());
  BOOST_REQUIRE_EQUAL(old->points.size(), 1u);
  BOOST_CHECK(std::isnan(old->points[0].eval_loss));
  BOOST_CHECK(old->points[0].learner_steps == std::vector<uint64_t>{7});
}

BOOST_AUTO_TEST_CASE(runs_side_by_side_share_their_axes) {
  testing::TempDir dir;
  RunSeries a = sample_series(), b = sample_series();
  b.mode = "dp";
  for (auto& p : b.points) p.seconds *= 2, p.loss *= 3;
  auto path = write_side_by_side(dir.file("modes.svg"), {"plan, decoupled", "plan, dp"}, {a, b});
  BOOST_REQUIRE_MESSAGE(path.ok(), path.status().to_string());
  const std::string svg = slurp(*path);
  BOOST_CHECK_EQUAL(count(svg, "class=\"panel\""), 4u);  // loss and goodput, per mode
  BOOST_CHECK(svg.find("plan, dp: training loss") != std::string::npos);
  // The decoupled panels' x axes run to dp's 19 s too (alone: 9.5 s): a tick at 15 in all four.
  BOOST_CHECK_EQUAL(count(svg, "text-anchor=\"middle\">15</text>"), 4u);
}

BOOST_AUTO_TEST_CASE(bad_series_files_name_the_file_and_line) {
  testing::TempDir dir;
  BOOST_REQUIRE(write_run_plots(dir.file("r"), sample_series()).ok());
  {
    std::ofstream out(dir.file("r.series.csv"), std::ios::app);
    out << "1.0,2,not-a-number,0,0,0,0,0,0,nan,3,1,2,3\n";
  }
  auto bad = read_run_series(dir.file("r"));
  BOOST_REQUIRE(!bad.ok());
  BOOST_TEST_MESSAGE(bad.status().to_string());
  BOOST_CHECK(bad.status().to_string().find("r.series.csv:23: not a number: 'not-a-number'") != std::string::npos);
  {
    std::ofstream out(dir.file("r.series.csv"));
    out << "seconds,tokens,loss,goodput,alive,versions_min,versions_max,bytes_up,bytes_down,steps_0\n1,2,3\n";
  }
  bad = read_run_series(dir.file("r"));
  BOOST_REQUIRE(!bad.ok());
  BOOST_CHECK(bad.status().to_string().find("r.series.csv:2: 3 columns, the header has 10") != std::string::npos);
  auto missing = read_run_series(dir.file("nothing"));
  BOOST_REQUIRE(!missing.ok());
  BOOST_CHECK(missing.status().to_string().find("nothing.series.csv") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_watch_keeps_a_long_run_in_bounded_memory) {
  RunWatch watch(1.0, 64);
  for (int i = 0; i <= 1000; ++i) {
    RunView v;
    v.seconds = 0.5 * i;
    v.tokens = 10u * i;
    v.sealed = i == 1000;
    watch.update(v);
  }
  const auto series = watch.series();
  BOOST_CHECK_LT(series.size(), 64u);
  BOOST_CHECK_GT(series.size(), 16u);
  BOOST_CHECK_EQUAL(series.front().seconds, 0.5);     // the first sample with data
  BOOST_CHECK_EQUAL(series.back().seconds, 500.0);    // the sealed end is always a point
  for (size_t i = 1; i < series.size(); ++i) BOOST_CHECK_GT(series[i].seconds, series[i - 1].seconds);
  watch.set_eval(0.5, 0.7);
  RunView later;
  later.seconds = 501;
  watch.update(later);
  BOOST_CHECK_EQUAL(watch.view().eval_loss, 0.5);  // kept over later views
}

BOOST_AUTO_TEST_CASE(svg_ticks_are_round_and_text_is_escaped) {
  Chart c;
  c.title = "a <b> & \"c\"";
  c.lines.push_back({"x", "", {0, 1, 2}, {0.0, 0.05, 0.1}});
  const std::string svg = svg_charts({c});
  BOOST_CHECK(svg.find("a &lt;b&gt; &amp; &quot;c&quot;") != std::string::npos);
  BOOST_CHECK(svg.find(">0.02</text>") != std::string::npos);
  BOOST_CHECK(svg.find(">0.10</text>") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
