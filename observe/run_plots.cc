#include "atoll/run_plots.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "atoll/file.h"
#include "atoll/svg_chart.h"

namespace atl {
namespace {

constexpr const char* kSeriesHeader = "seconds,tokens,loss,goodput,alive,versions_min,versions_max,bytes_up,bytes_down";
// Written since evaluators report held-out losses; files without it still read.
constexpr const char* kEvalColumn = ",eval_loss";
// Written since learners join and leave (members up now); files without it
// still read. A learner's steps cell is empty while it is not a member.
constexpr const char* kPresentColumn = ",present";

Status write_text(const std::string& path, const std::string& text) {
  return write_file_atomic(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

std::string series_csv(const RunSeries& s) {
  std::ostringstream out;
  out << "# atoll run series: mode=" << s.mode << " learners=" << s.learners << "\n" << kSeriesHeader << kEvalColumn
      << kPresentColumn;
  for (int i = 0; i < s.learners; ++i) out << ",steps_" << i;
  out << "\n";
  char buf[256];
  for (const auto& p : s.points) {
    std::snprintf(buf, sizeof buf, "%.3f,%llu,%.6g,%.6g,%.6g,%llu,%llu,%llu,%llu", p.seconds,
                  static_cast<unsigned long long>(p.tokens), p.loss, p.goodput, p.alive,
                  static_cast<unsigned long long>(p.versions_min), static_cast<unsigned long long>(p.versions_max),
                  static_cast<unsigned long long>(p.bytes_up), static_cast<unsigned long long>(p.bytes_down));
    out << buf;
    std::snprintf(buf, sizeof buf, ",%.6g,%d", p.eval_loss, p.present);
    out << buf;
    for (int i = 0; i < s.learners; ++i) {
      const auto at = static_cast<size_t>(i);
      out << ",";
      if (at < p.learner_member.size() && !p.learner_member[at]) continue;  // not a member then
      out << (at < p.learner_steps.size() ? p.learner_steps[at] : 0);
    }
    out << "\n";
  }
  return out.str();
}

std::string events_csv(const RunSeries& s) {
  std::ostringstream out;
  out << "seconds,kind,learner,text\n";
  char buf[64];
  for (const auto& e : s.events) {
    std::snprintf(buf, sizeof buf, "%.3f", e.seconds);
    // The text may hold commas and quotes: quoted as RFC 4180 says, on one line.
    std::string text = "\"";
    for (char c : e.text) {
      if (c == '\n' || c == '\r') c = ' ';
      if (c == '"') text += '"';
      text += c;
    }
    out << buf << "," << e.kind << "," << e.learner << "," << text << "\"\n";
  }
  return out.str();
}

std::vector<std::string> split(const std::string& line, char sep, size_t max_parts) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (parts.size() + 1 < max_parts) {
    const size_t next = line.find(sep, pos);
    if (next == std::string::npos) break;
    parts.push_back(line.substr(pos, next - pos));
    pos = next + 1;
  }
  parts.push_back(line.substr(pos));
  return parts;
}

Result<double> number(const std::string& text, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0') return Status::invalid_argument(where + ": not a number: '" + text + "'");
  return v;
}

// The faults and restarts worth a mark: kills, crashes, stalls, ... and supervisor restarts.
std::vector<ChartMark> marks_of(const std::vector<EventLine>& events) {
  std::vector<ChartMark> marks;
  for (const auto& e : events) {
    if (!e.kind.starts_with("fault")) continue;
    std::string label = e.kind.substr(e.kind.find(' ') == std::string::npos ? 0 : e.kind.find(' ') + 1);
    if (e.learner >= 0) label += " " + std::to_string(e.learner);
    marks.push_back({e.seconds, label});
  }
  for (const auto& e : events)
    if (e.kind == "restart") marks.push_back({e.seconds, "", "#d4a72c"});
  return marks;
}

ChartLine column(const RunSeries& s, const char* name, double (*x)(const SeriesPoint&), double (*y)(const SeriesPoint&),
                 bool positive_only = false) {
  ChartLine l;
  l.name = name;
  for (const auto& p : s.points) {
    const double v = y(p);
    if (positive_only && !(v > 0)) continue;  // no loss reported yet
    l.xs.push_back(x(p));
    l.ys.push_back(v);
  }
  return l;
}

double seconds_of(const SeriesPoint& p) { return p.seconds; }
double tokens_of(const SeriesPoint& p) { return static_cast<double>(p.tokens); }
double loss_of(const SeriesPoint& p) { return p.loss; }
double eval_loss_of(const SeriesPoint& p) { return p.eval_loss; }
double goodput_of(const SeriesPoint& p) { return p.goodput; }
double alive_of(const SeriesPoint& p) { return p.alive; }

Chart loss_chart(const RunSeries& s, bool against_tokens) {
  Chart c;
  c.title = std::string("training loss against ") + (against_tokens ? "tokens" : "time") + " (" + s.mode + ")";
  c.x_label = against_tokens ? "tokens" : "seconds";
  c.y_label = "loss (nats per token)";
  c.lines.push_back(column(s, "", against_tokens ? tokens_of : seconds_of, loss_of, true));
  // Held-out losses a learner's evaluator reported (models atoll does not run).
  if (ChartLine held = column(s, "held-out", against_tokens ? tokens_of : seconds_of, eval_loss_of, true);
      !held.xs.empty()) {
    c.title = std::string("training and held-out loss against ") + (against_tokens ? "tokens" : "time") + " (" +
              s.mode + ")";
    c.lines.front().name = "training";
    c.lines.push_back(std::move(held));
  }
  if (!against_tokens) c.marks = marks_of(s.events);
  return c;
}

Chart goodput_chart(const RunSeries& s) {
  Chart c;
  c.title = "goodput and alive share (" + s.mode + ")";
  c.x_label = "seconds";
  c.y_label = "share";
  c.y_range = std::pair{0.0, 1.0};
  c.lines.push_back(column(s, "goodput", seconds_of, goodput_of));
  c.lines.push_back(column(s, "alive", seconds_of, alive_of));
  c.marks = marks_of(s.events);
  return c;
}

Chart learners_chart(const RunSeries& s) {
  Chart c;
  c.title = "steps per learner (" + s.mode + "; faults marked)";
  c.x_label = "seconds";
  c.y_label = "inner steps";
  for (int i = 0; i < s.learners; ++i) {
    ChartLine l;
    l.name = "learner " + std::to_string(i);
    const auto at = static_cast<size_t>(i);
    for (const auto& p : s.points) {
      // Drawn only while it is a member: a departed learner's line stops, a newcomer's starts at its join.
      const bool member = at >= p.learner_member.size() || p.learner_member[at];
      l.xs.push_back(p.seconds);
      l.ys.push_back(member && at < p.learner_steps.size() ? static_cast<double>(p.learner_steps[at]) : NAN);
    }
    c.lines.push_back(std::move(l));
  }
  c.marks = marks_of(s.events);
  return c;
}

Chart present_chart(const RunSeries& s) {
  Chart c;
  c.title = "learners present (members up; " + s.mode + ")";
  c.x_label = "seconds";
  c.y_label = "learners";
  c.lines.push_back(column(s, "", seconds_of, [](const SeriesPoint& p) { return static_cast<double>(p.present); }));
  c.marks = marks_of(s.events);
  return c;
}

}  // namespace

RunSeries series_of(const Report& report) {
  RunSeries s;
  s.mode = report.mode;
  s.learners = report.learners;
  s.points = report.series;
  s.events = report.events;
  return s;
}

std::string plot_stem(const std::string& report_path) {
  return report_path.ends_with(".json") ? report_path.substr(0, report_path.size() - 5) : report_path;
}

Result<std::vector<std::string>> write_run_plots(const std::string& stem, const RunSeries& s) {
  std::vector<std::string> written;
  const std::vector<std::pair<std::string, std::string>> files = {
      {stem + ".series.csv", series_csv(s)},
      {stem + ".events.csv", events_csv(s)},
      {stem + ".loss.svg", svg_charts({loss_chart(s, true), loss_chart(s, false)})},
      {stem + ".learners.svg", svg_charts({learners_chart(s), present_chart(s)})},
      {stem + ".goodput.svg", svg_charts({goodput_chart(s)})},
  };
  for (const auto& [path, text] : files) {
    if (Status st = write_text(path, text); !st.ok()) return st;
    written.push_back(path);
  }
  return written;
}

Result<RunSeries> read_run_series(const std::string& stem) {
  RunSeries s;
  const std::string series_path = stem + ".series.csv";
  auto text = read_text(series_path);
  if (!text.ok()) return text.status().with_context("the run's series (written beside its report)");
  std::istringstream in(*text);
  std::string line;
  int row = 0;
  size_t fixed = 9;  // columns before the learners' steps
  while (std::getline(in, line)) {
    ++row;
    const std::string where = series_path + ":" + std::to_string(row);
    if (line.empty()) continue;
    if (line.starts_with("#")) {
      if (const size_t m = line.find("mode="); m != std::string::npos) s.mode = line.substr(m + 5, line.find(' ', m) - m - 5);
      continue;
    }
    if (line.starts_with("seconds,")) {
      if (!line.starts_with(kSeriesHeader)) return Status::invalid_argument(where + ": not an atoll series header");
      const std::string header = std::string(kSeriesHeader) + kEvalColumn;
      fixed = line.starts_with(header + kPresentColumn) ? 11 : line.starts_with(header) ? 10 : 9;
      s.learners = static_cast<int>(split(line, ',', SIZE_MAX).size() - fixed);
      continue;
    }
    const auto cells = split(line, ',', SIZE_MAX);
    if (cells.size() != fixed + static_cast<size_t>(s.learners))
      return Status::invalid_argument(where + ": " + std::to_string(cells.size()) + " columns, the header has " +
                                      std::to_string(fixed + static_cast<size_t>(s.learners)));
    std::vector<double> v;
    SeriesPoint p;
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i >= fixed) p.learner_member.push_back(!cells[i].empty());  // empty: not a member then
      if (i >= fixed && cells[i].empty()) {
        v.push_back(0);
        continue;
      }
      auto x = number(cells[i], where);
      if (!x.ok()) return x.status();
      v.push_back(*x);
    }
    p.seconds = v[0];
    p.tokens = static_cast<uint64_t>(v[1]);
    p.loss = v[2];
    p.goodput = v[3];
    p.alive = v[4];
    p.versions_min = static_cast<uint64_t>(v[5]);
    p.versions_max = static_cast<uint64_t>(v[6]);
    p.bytes_up = static_cast<uint64_t>(v[7]);
    p.bytes_down = static_cast<uint64_t>(v[8]);
    if (fixed >= 10) p.eval_loss = v[9];
    if (fixed >= 11) p.present = static_cast<int>(v[10]);
    for (size_t i = fixed; i < v.size(); ++i) p.learner_steps.push_back(static_cast<uint64_t>(v[i]));
    s.points.push_back(std::move(p));
  }
  const std::string events_path = stem + ".events.csv";
  auto events = read_text(events_path);
  if (!events.ok()) return events.status();
  std::istringstream ev(*events);
  row = 0;
  while (std::getline(ev, line)) {
    if (++row == 1 || line.empty()) continue;  // the header
    const auto cells = split(line, ',', 4);
    const std::string where = events_path + ":" + std::to_string(row);
    if (cells.size() != 4) return Status::invalid_argument(where + ": want seconds,kind,learner,text");
    auto t = number(cells[0], where);
    auto learner = number(cells[2], where);
    if (!t.ok()) return t.status();
    if (!learner.ok()) return learner.status();
    // Quoted (RFC 4180), or as files before the quotes wrote it: the rest of the line.
    std::string said = cells[3];
    if (said.size() >= 2 && said.front() == '"' && said.back() == '"') {
      std::string unquoted;
      for (size_t i = 1; i + 1 < said.size(); ++i) {
        unquoted += said[i];
        if (said[i] == '"' && said[i + 1] == '"') ++i;
      }
      said = std::move(unquoted);
    }
    s.events.push_back({*t, cells[1], static_cast<int64_t>(*learner), std::move(said)});
  }
  return s;
}

Result<std::vector<std::string>> redraw_run_plots(const std::string& stem) {
  auto s = read_run_series(stem);
  if (!s.ok()) return s.status();
  return write_run_plots(stem, *s);
}

Result<std::vector<std::string>> write_suite_plots(const std::string& stem, std::vector<SuiteRun> runs) {
  const auto file_name = [](std::string s) {
    for (char& c : s)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_') c = '_';
    return s;
  };
  std::stable_sort(runs.begin(), runs.end(), [](const SuiteRun& a, const SuiteRun& b) {
    return a.series.mode < b.series.mode;
  });
  std::vector<std::string> written;
  std::map<std::string, std::vector<const SuiteRun*>> by_plan;
  for (const auto& r : runs) {
    auto w = write_run_plots(stem + "." + file_name(r.plan) + "-" + r.series.mode, r.series);
    if (!w.ok()) return w.status();
    written.insert(written.end(), w->begin(), w->end());
    by_plan[r.plan].push_back(&r);
  }
  for (const auto& [plan, of_plan] : by_plan) {
    if (of_plan.size() < 2) continue;
    std::vector<std::string> titles;
    std::vector<RunSeries> series;
    for (const SuiteRun* r : of_plan) titles.push_back(plan + ", " + r->series.mode), series.push_back(r->series);
    auto w = write_side_by_side(stem + "." + file_name(plan) + ".modes.svg", titles, series);
    if (!w.ok()) return w.status();
    written.push_back(*w);
  }
  return written;
}

Result<std::string> write_side_by_side(const std::string& path, const std::vector<std::string>& titles,
                                       const std::vector<RunSeries>& runs) {
  std::vector<Chart> loss, goodput;
  for (size_t i = 0; i < runs.size(); ++i) {
    Chart l = loss_chart(runs[i], false), g = goodput_chart(runs[i]);
    l.title = titles[i] + ": training loss";
    g.title = titles[i] + ": goodput, alive";
    loss.push_back(std::move(l));
    goodput.push_back(std::move(g));
  }
  // The same axes in every column: the modes compare at a glance.
  const auto xs = x_span(loss).value_or(std::pair{0.0, 1.0});
  const auto gx = x_span(goodput).value_or(xs);
  const std::pair<double, double> x_all{0.0, std::max(xs.second, gx.second)};
  const auto ys = y_span(loss);
  for (auto& c : loss) c.x_range = x_all, c.y_range = ys;
  for (auto& c : goodput) c.x_range = x_all;
  std::vector<Chart> panels = loss;
  panels.insert(panels.end(), goodput.begin(), goodput.end());
  if (Status st = write_text(path, svg_charts(panels, static_cast<int>(runs.size()))); !st.ok()) return st;
  return path;
}

}  // namespace atl
