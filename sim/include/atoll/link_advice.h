// What to set for a given link: atoll's protocol simulated on it (the
// [utilization] search of atoll/simulation.h) with the topology's [outer]
// settings and with the alternatives that send the same model over fewer or
// shorter crossings, each with the quality it was measured to cost. The
// answer to "my learners have this link: which fragments, H, codecs and
// eager setting keep my accelerators busy?" (`atoll bandwidth --link`).
//
// The options, cheapest in quality first:
//   as set           the topology's outer settings
//   streamed         the same P push times per H steps, each push cut into k
//                    fragments sent back to back (outer.fragments = k P,
//                    outer.stream = k; design.md, "Streaming rounds")
//   streamed, eager  and eager updates: a broadcast is late only when the
//                    fragment's next push falls due, not tau steps after
//   streamed, H x 2  and half as many rounds
//   streamed, eager, H x 2
// Utilization is the share of compute the learners would keep if they waited
// for broadcasts later than their deadline, as Table 4's rows count it
// (atoll's learners never wait: a late broadcast costs staleness, not time).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "atoll/link_shape.h"
#include "atoll/status.h"
#include "atoll/topology.h"

namespace atl {

struct LinkQuestion {
  double parameters = 0;     // N
  double step_seconds = 0;   // T: one inner step of one learner, compute only
  int learners = 4;          // M, each on a link like `link`
  int tensors = 0;           // the model's, which caps the fragments; 0: no cap (a size given alone)
  OuterSpec outer;           // the topology's
  LinkShape link;            // each learner's, each way (rate > 0)
  double target = 0.95;      // in (0, 1)
};

struct LinkOption {
  std::string name;
  std::vector<std::string> sets;  // on top of the topology: "outer.fragments=144"
  double utilization = 0;         // on the link, in (0, 1]
  std::optional<double> needs_bits_per_second;  // the least of the grid that keeps the target
  std::string quality;            // what it was measured to cost, and where
};

struct LinkAdvice {
  std::vector<LinkOption> options;  // in the order above; streamed ones left out when the model has too few tensors
  int chosen = -1;                  // the first that keeps the target; -1: none does
  std::string note;                 // why streamed options are missing, if they are
};

// InvalidArgument for a question out of range (parameters, step, learners,
// link rate, target); otherwise the simulated options.
Result<LinkAdvice> advise_link(const LinkQuestion& question);

}  // namespace atl
