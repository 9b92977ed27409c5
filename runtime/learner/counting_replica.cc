#include "atoll/counting_replica.h"

#include <string>

namespace atl {

CountingReplica::CountingReplica(uint32_t id, uint64_t incarnation, std::shared_ptr<const Model> model)
    : id_(id),
      incarnation_(incarnation),
      model_(std::move(model)),
      ledger_(model_->topology, default_spec(model_->topology, id).speed, model_->zero_deltas.size()) {}

Register CountingReplica::make_register(std::string_view, uint32_t) const {
  return Register{id_, incarnation_, model_->fingerprint, "", {}, model_->initial_crc};
}

Status CountingReplica::welcome(const Welcome& w) {
  for (const auto& fv : w.fragments)
    if (fv.fragment >= ledger_.size())
      return Status::invalid_argument("welcome names fragment " + std::to_string(fv.fragment) + " of " +
                                      std::to_string(ledger_.size()));
  for (const auto& fv : w.fragments)
    if (ledger_.welcome(fv.fragment, fv.version) == FragmentLedger::Welcomed::kNewer)
      catch_up(fv.fragment, fv.version, fv.merged_through);
  return {};
}

Result<Moments> CountingReplica::moments_for(const MomentsPull& pull) const {
  if (!ledger_.welcomed()) return Status::unavailable("no optimizer state to give before the first welcome");
  if (pull.shard >= model_->moments.size()) return Status::invalid_argument("moments asked by an unknown shard");
  return Moments{pull.request, model_->moments[pull.shard]};
}

void CountingReplica::finish_step(const StepResult& r, double step_seconds) {
  ledger_.finish_step(r.tokens, step_seconds);
}

Result<Push> CountingReplica::answer(const Pull& pull) {
  if (pull.fragment >= ledger_.size())
    return Status::invalid_argument("pull for fragment " + std::to_string(pull.fragment) + " of " +
                                    std::to_string(ledger_.size()));
  if (!ledger_.track(pull.fragment).welcomed)
    return Status::unavailable("pull for fragment " + std::to_string(pull.fragment) + " before the first welcome");
  return make_push(pull.fragment, pull.round);
}

std::vector<Push> CountingReplica::due_pushes() {
  std::vector<Push> out;
  for (uint32_t p = 0; p < ledger_.size(); ++p)
    if (ledger_.due(p)) out.push_back(make_push(p, 0));
  return out;
}

// LearnerCore::apply without held broadcasts: the simulator's links deliver in order.
Status CountingReplica::apply(const Broadcast& b) {
  if (b.fragment >= ledger_.size())
    return Status::invalid_argument("broadcast for fragment " + std::to_string(b.fragment) + " of " +
                                    std::to_string(ledger_.size()));
  const FragmentLedger::Track& t = ledger_.track(b.fragment);
  if (!t.welcomed)
    return Status::unavailable("broadcast of fragment " + std::to_string(b.fragment) + " before the first welcome");
  if (b.version <= t.version) return {};
  if (b.repair && b.merged_through.size() == 1) {
    catch_up(b.fragment, b.version, b.merged_through.front());
    return {};
  }
  if (b.delta && b.base_version != t.version)
    return Status::unavailable("broadcast of fragment " + std::to_string(b.fragment) + " version " +
                               std::to_string(b.version) + " is a difference to version " +
                               std::to_string(b.base_version) + ", and this learner holds version " +
                               std::to_string(t.version));
  const auto plan = ledger_.plan_move(b.fragment, /*may_carry=*/b.version == t.version + 1,
                                      ledger_.credited_through(b.fragment, b, id_));
  ledger_.move(b.fragment, b.version, plan);
  return {};
}

void CountingReplica::catch_up(uint32_t p, uint64_t version, uint64_t merged_through) {
  ledger_.move(p, version, ledger_.plan_move(p, /*may_carry=*/true, ledger_.merged_of_whole(p, merged_through)));
}

}  // namespace atl
