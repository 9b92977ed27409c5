// ChaosVerdict: which of a fault plan's invariants one run broke.
//
// A pure fold over what the run left: its report, its final global
// parameters and its event log (atoll/run_event.h). No actors: the verdict is
// tested from hand-written event lists (tests/chaos/verdict_test.cc).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "atoll/fault_plan.h"
#include "atoll/report.h"
#include "atoll/run_event.h"

namespace atl {

struct ChaosVerdict {
  uint64_t faults_injected = 0;  // injections that hit a running target
  uint64_t recoveries = 0;       // children restarted by their supervisor
  // Share of the learner time allocated to the run (members' time as
  // members) that the learners were up: each kill or crash to that learner's
  // next registration is down. Bounds any mode's goodput.
  double alive_fraction = 1.0;
  std::vector<std::string> violations;  // each broken invariant, with its figures
  std::vector<std::string> notes;       // planned faults never injected (the run ended first), and why
};

// Every invariant of `plan` but max_eval_loss_increase, which needs a second
// run. The plan's faults are matched to injections by `where`.
ChaosVerdict judge(const FaultPlan& plan, const Report& report, std::span<const float> theta,
                   const std::vector<TimedEvent>& events);

}  // namespace atl
