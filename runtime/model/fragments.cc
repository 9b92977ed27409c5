#include "atoll/fragments.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <numeric>
#include <string>

namespace atl {

const char* merge_rule_name(MergeRule rule) { return rule == MergeRule::kAvg ? "avg" : "rda"; }

Result<std::vector<Fragment>> plan_fragments(const ParamLayout& layout, int count) {
  if (count < 1)
    return Status::invalid_argument("fragments must be at least 1, got " + std::to_string(count));
  if (count > layout.count())
    return Status::invalid_argument("fragments (" + std::to_string(count) +
                                    ") exceeds the model's tensors (" +
                                    std::to_string(layout.count()) + "): a fragment would be empty");

  std::vector<int> order(static_cast<size_t>(layout.count()));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const auto& ta = layout.tensor(a);
    const auto& tb = layout.tensor(b);
    if (ta.size() != tb.size()) return ta.size() > tb.size();
    return ta.name < tb.name;
  });

  std::vector<std::vector<int>> members(static_cast<size_t>(count));
  std::vector<size_t> load(static_cast<size_t>(count), 0);
  for (int t : order) {
    const auto lightest = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    members[lightest].push_back(t);
    load[lightest] += layout.tensor(t).size();
  }

  std::vector<Fragment> fragments(static_cast<size_t>(count));
  for (int p = 0; p < count; ++p) {
    auto& f = fragments[static_cast<size_t>(p)];
    auto& ts = members[static_cast<size_t>(p)];
    std::sort(ts.begin(), ts.end());
    f.id = p;
    f.rule = MergeRule::kRda;
    for (int t : ts) {
      const auto& spec = layout.tensor(t);
      f.pieces.push_back({t, spec.offset, f.size, spec.size()});
      f.size += spec.size();
      if (spec.role != TensorRole::kBody) f.rule = MergeRule::kAvg;
    }
  }
  return fragments;
}

std::string describe_merge_rules(const ParamLayout& layout, const std::vector<Fragment>& fragments) {
  std::string named;  // the tensors that made their fragment averaged
  int named_count = 0, avg_fragments = 0, avg_tensors = 0;
  for (const auto& f : fragments) {
    if (f.rule != MergeRule::kAvg) continue;
    ++avg_fragments;
    for (const auto& piece : f.pieces) {
      ++avg_tensors;
      if (layout.tensor(piece.tensor).role == TensorRole::kBody) continue;
      if (named_count++ < 6) named += (named.empty() ? "" : ", ") + layout.tensor(piece.tensor).name;
    }
  }
  const int total = layout.count();
  if (avg_fragments == 0)
    return "RDA for all " + std::to_string(total) + " tensors: none is an embedding or output head by model.avg " +
           "(a model that has them wants their names there)";
  if (named_count > 6) named += " and " + std::to_string(named_count - 6) + " more";
  std::string s = "weighted mean for " + named + " (" + std::to_string(avg_fragments) + " of " +
                  std::to_string(fragments.size()) + " fragments";
  if (avg_tensors > named_count) s += ", " + std::to_string(avg_tensors) + " tensors with those beside them";
  s += ")";
  if (total - avg_tensors == 1) s += "; RDA for the other tensor";
  else if (total > avg_tensors) s += "; RDA for the other " + std::to_string(total - avg_tensors) + " tensors";
  return s;
}

uint64_t steps_until_due(int fragment, int fragments, int sync_every, uint64_t version) {
  if (version > 0) return static_cast<uint64_t>(sync_every);
  const auto due = static_cast<uint64_t>(fragment + 1) * static_cast<uint64_t>(sync_every) /
                   static_cast<uint64_t>(fragments);
  return due > 0 ? due : 1;
}

void gather(const Fragment& fragment, std::span<const float> params, std::span<float> out) {
  assert(out.size() == fragment.size);
  for (const auto& piece : fragment.pieces)
    std::memcpy(out.data() + piece.fragment_offset, params.data() + piece.param_offset,
                piece.size * sizeof(float));
}

void scatter(const Fragment& fragment, std::span<const float> values, std::span<float> params) {
  assert(values.size() == fragment.size);
  for (const auto& piece : fragment.pieces)
    std::memcpy(params.data() + piece.param_offset, values.data() + piece.fragment_offset,
                piece.size * sizeof(float));
}

}  // namespace atl
