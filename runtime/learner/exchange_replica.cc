#include "atoll/exchange_replica.h"

#include <algorithm>
#include <string>
#include <utility>

#include "atoll/job.h"

namespace atl {

Result<std::unique_ptr<ExchangeReplica>> ExchangeReplica::create(uint32_t id, uint64_t incarnation,
                                                                 const Topology& t, const ParamLayout& layout,
                                                                 double speed_label, uint32_t batch_label) {
  if (id >= learner_slots(t))
    return Status::invalid_argument("learner " + std::to_string(id) + " does not exist: the topology has " +
                                    std::to_string(learner_slots(t)) + " learner slots");
  if (t.mode != Mode::kDecoupled || t.outer.barrier)
    return Status::invalid_argument(std::string("a learner trained outside atoll needs mode = \"decoupled\" without "
                                                "outer.barrier (this run: ") + mode_name(t.mode) +
                                    (t.outer.barrier ? ", barrier" : "") + "): its steps never wait");
  auto fragments = plan_fragments(layout, t);
  if (!fragments.ok()) return fragments.status();
  return std::unique_ptr<ExchangeReplica>(
      new ExchangeReplica(id, incarnation, t, layout, std::move(*fragments), speed_label, batch_label));
}

// Its Register gives no initial CRC (0): a welcome always carries its values.
ExchangeReplica::ExchangeReplica(uint32_t id, uint64_t incarnation, const Topology& topology,
                                 const ParamLayout& layout, std::vector<Fragment> fragments, double speed_label,
                                 uint32_t batch_label)
    : LearnerCore(id, incarnation, topology, default_spec(topology, id), std::move(fragments), layout.size(), 0,
                  speed_label, batch_label),
      layout_(layout),
      readable_(fragment_count(), false) {}

Result<std::vector<float>> ExchangeReplica::initial_values() const {
  // Never offered: its Register gives no initial CRC.
  return Status::invalid_argument("a learner trained outside atoll cannot make the seed's initialization");
}

Result<OptimizerState> ExchangeReplica::optimizer_state() const {
  if (!moments_read_) return Status::unavailable("the optimizer's moments were not read at this step boundary");
  return OptimizerState{moments_read_->step, encode_payload(Codec::kBf16, 0, moments_read_->m),
                        encode_payload(Codec::kBf16, 0, moments_read_->v)};
}

Status ExchangeReplica::take_optimizer_state(int64_t step, std::vector<float> m, std::vector<float> v) {
  moments_in_ = OptimizerMoments{step, std::move(m), std::move(v)};
  return {};
}

void ExchangeReplica::adopted(uint32_t fragment, float scale, std::vector<float> offset) {
  updates_.push_back({fragment, scale, std::move(offset)});
}

bool ExchangeReplica::readable(uint32_t fragment) const { return fragment < readable_.size() && readable_[fragment]; }

Status ExchangeReplica::read(const std::vector<uint32_t>& fragments, const std::vector<std::vector<float>>& values,
                             const std::optional<OptimizerMoments>& moments) {
  const auto& all = this->fragments();
  if (fragments.size() != values.size())
    return Status::invalid_argument(std::to_string(fragments.size()) + " fragments read, " +
                                    std::to_string(values.size()) + " vectors handed");
  for (size_t i = 0; i < fragments.size(); ++i) {
    if (fragments[i] >= all.size())
      return Status::invalid_argument("fragment " + std::to_string(fragments[i]) + " read, of " +
                                      std::to_string(all.size()));
    if (values[i].size() != all[fragments[i]].size)
      return Status::invalid_argument("fragment " + std::to_string(fragments[i]) + " read with " +
                                      std::to_string(values[i].size()) + " values, it has " +
                                      std::to_string(all[fragments[i]].size));
  }
  if (moments && (moments->m.size() != params_.size() || moments->v.size() != params_.size() || moments->step < 0))
    return Status::invalid_argument("optimizer moments read with " + std::to_string(moments->m.size()) + " and " +
                                    std::to_string(moments->v.size()) + " values at step " +
                                    std::to_string(moments->step) + ", the model has " + std::to_string(params_.size()));
  for (size_t i = 0; i < fragments.size(); ++i) {
    scatter(all[fragments[i]], values[i], params_);
    readable_[fragments[i]] = true;
  }
  if (moments) moments_read_ = moments;
  return {};
}

void ExchangeReplica::end_boundary() {
  std::fill(readable_.begin(), readable_.end(), false);
  moments_read_.reset();
}

std::vector<FragmentUpdate> ExchangeReplica::take_updates() { return std::exchange(updates_, {}); }
std::optional<OptimizerMoments> ExchangeReplica::take_moments() { return std::exchange(moments_in_, std::nullopt); }

}  // namespace atl
