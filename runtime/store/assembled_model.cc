#include "atoll/assembled_model.h"

#include <cmath>
#include <string>

namespace atl {

Result<AssembledModel> assemble_from_checkpoints(std::span<const CheckpointState> by_shard,
                                                 uint64_t layout_fingerprint, const std::vector<Fragment>& plan,
                                                 size_t parameters) {
  if (by_shard.empty()) return Status::invalid_argument("no checkpoint to assemble the model from");
  const int shards = static_cast<int>(by_shard.size());
  const uint64_t plan_print = plan_fingerprint(plan);
  AssembledModel m;
  m.theta.assign(parameters, 0.0f);
  m.versions.assign(plan.size(), 0);
  std::vector<bool> taken(plan.size(), false);
  for (int s = 0; s < shards; ++s) {
    const CheckpointState& c = by_shard[static_cast<size_t>(s)];
    const std::string who = shards > 1 ? "shard " + std::to_string(s) + "'s checkpoint" : "the checkpoint";
    if (c.fingerprint != layout_fingerprint)
      return Status::invalid_argument(who + " belongs to another model (layout fingerprint " +
                                      std::to_string(c.fingerprint) + ", this topology's " +
                                      std::to_string(layout_fingerprint) + ")");
    if (c.plan_fingerprint != 0 && c.plan_fingerprint != plan_print)
      return Status::invalid_argument(who + " was written for another fragment plan (plan fingerprint " +
                                      std::to_string(c.plan_fingerprint) + ", this topology's " +
                                      std::to_string(plan_print) + "): outer.fragments or syncer.shards differ");
    for (const auto& f : c.fragments) {
      if (f.fragment >= plan.size() || f.values.size() != plan[f.fragment].size)
        return Status::invalid_argument(who + ": fragment " + std::to_string(f.fragment) +
                                        " does not fit this topology's plan");
      if (shard_of(f.fragment, shards) != static_cast<uint32_t>(s))
        return Status::invalid_argument(who + " holds fragment " + std::to_string(f.fragment) + ", which shard " +
                                        std::to_string(shard_of(f.fragment, shards)) + " owns");
      if (taken[f.fragment])
        return Status::invalid_argument(who + " holds fragment " + std::to_string(f.fragment) + " twice");
      for (float v : f.values)
        if (!std::isfinite(v))
          return Status::invalid_argument(who + ": fragment " + std::to_string(f.fragment) +
                                          " holds non-finite parameters");
      scatter(plan[f.fragment], f.values, m.theta);
      m.versions[f.fragment] = f.version;
      taken[f.fragment] = true;
    }
    m.rounds.push_back(c.rounds);
  }
  for (uint32_t p = 0; p < plan.size(); ++p)
    if (!taken[p])
      return Status::invalid_argument("no checkpoint holds fragment " + std::to_string(p) + " (shard " +
                                      std::to_string(shard_of(p, shards)) + "'s)");
  return m;
}

}  // namespace atl
