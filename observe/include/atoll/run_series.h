// SeriesPoint and EventLine: a run over time, as its report keeps it.
//
// RunWatch (atoll/run_view.h) samples them while the run goes; the report
// carries them; run_plots (atoll/run_plots.h) writes them as JSON lines and
// draws them. Units: seconds since the run started, tokens, bytes; the loss
// is the training loss in nats per token, the held-out loss too.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace atl {

// One sample of the run, taken every quarter second (a long run: less often).
struct SeriesPoint {
  double seconds = 0.0;
  uint64_t tokens = 0;
  double loss = 0.0;     // training loss, mean of the connected learners
  double goodput = 0.0;  // so far
  double alive = 0.0;    // share of members up now
  int present = 0;       // members up now (docs/design.md section 6)
  uint64_t versions_min = 0, versions_max = 0;
  uint64_t bytes_up = 0, bytes_down = 0;
  // The newest held-out loss a learner's evaluator reported (atoll.Evaluator;
  // models atoll does not run); NaN: none yet.
  double eval_loss = std::numeric_limits<double>::quiet_NaN();
  std::vector<uint64_t> learner_steps;  // per learner, all incarnations
  std::vector<bool> learner_member;     // per learner: a member now (its line is drawn only then)
};

// A line of the event tape, for people: a fault, a restart, a re-integration.
struct EventLine {
  double seconds = 0.0;
  std::string kind;  // kind_of() (atoll/run_event.h): "fault kill", "restart", "registration", ...
  int64_t learner = -1;
  std::string text;  // one line
};

}  // namespace atl
