// The JSON of one learner's (and one syncer shard's) figures, and of the
// syncer's counts, shared by the report (report.cc) and the view
// (run_view.cc), so that both show the same fields. Internal.
#pragma once

#include "atoll/report.h"
#include "atoll/json_writer.h"

namespace atl {

void write_learner_json(JsonWriter& j, const LearnerReport& l);
void write_shard_json(JsonWriter& j, const ShardReport& s);
// Every count of kSyncerCounts, under its name.
void write_counts(JsonWriter& j, const SyncerCountValues& counts);

}  // namespace atl
