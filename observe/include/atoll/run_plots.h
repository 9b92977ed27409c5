// Run plots: a report's time series as CSV and SVG, beside its JSON.
//
// For a report written to DIR/NAME.json, write_run_plots() writes
//   DIR/NAME.series.csv     one row per sample: seconds, tokens, loss, goodput,
//                           alive, versions, bytes, then each learner's steps
//   DIR/NAME.events.csv     seconds, kind, learner, text: faults, restarts,
//                           re-integrations
//   DIR/NAME.loss.svg       training loss against tokens and against time
//   DIR/NAME.learners.svg   each learner's steps against time, faults marked
//   DIR/NAME.goodput.svg    goodput and alive share against time, faults marked
// and `atoll plot DIR/NAME.json` draws the SVGs again from the CSVs.
// Side by side runs (the modes of one chaos plan) go in one picture, one
// panel per mode on the same axes: write_side_by_side().
#pragma once

#include <string>
#include <vector>

#include "atoll/report.h"
#include "atoll/status.h"

namespace atl {

// The series and events of one run, as read back from its CSVs.
struct RunSeries {
  std::string mode;
  int learners = 0;
  std::vector<SeriesPoint> points;
  std::vector<EventLine> events;
};

RunSeries series_of(const Report& report);

// DIR/NAME for a report at DIR/NAME.json (the path less its .json).
std::string plot_stem(const std::string& report_path);

// Writes the CSVs and the plots of `series` for the stem; returns the paths written.
Result<std::vector<std::string>> write_run_plots(const std::string& stem, const RunSeries& series);
// Draws the plots again from the CSVs at `stem` (`atoll plot`).
Result<std::vector<std::string>> redraw_run_plots(const std::string& stem);
Result<RunSeries> read_run_series(const std::string& stem);

// The runs of a suite (atoll chaos): each run's CSVs and plots as
// STEM.<plan>-<mode>.*, and for a plan of several modes STEM.<plan>.modes.svg
// (their modes side by side, in name order). Plan names are made file-safe:
// [A-Za-z0-9_.], anything else '_'. Returns the paths written.
struct SuiteRun {
  std::string plan;
  RunSeries series;
};
Result<std::vector<std::string>> write_suite_plots(const std::string& stem, std::vector<SuiteRun> runs);

// One picture of runs side by side (training loss and goodput against time,
// a column per run, the same axes), e.g. the modes of one chaos plan.
Result<std::string> write_side_by_side(const std::string& path, const std::vector<std::string>& titles,
                                       const std::vector<RunSeries>& runs);

}  // namespace atl
