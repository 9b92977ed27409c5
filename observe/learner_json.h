// The JSON of one learner's figures, shared by the report (report.cc) and
// the view (run_view.cc), so that both show the same fields. Internal.
#pragma once

#include "atoll/report.h"
#include "atoll/json_writer.h"

namespace atl {

void write_learner_json(JsonWriter& j, const LearnerReport& l);

}  // namespace atl
