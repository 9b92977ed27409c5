#include "atoll/fragments.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "atoll/fnv1a.h"

namespace atl {

const char* merge_rule_name(MergeRule rule) { return rule == MergeRule::kAvg ? "avg" : "rda"; }

size_t row_floats(const TensorSpec& t) {
  if (t.cols == 1) return 1;                                // a vector
  if (!t.dims.empty()) return static_cast<size_t>(t.cols);  // row-major: a row along dims[0]
  return static_cast<size_t>(t.rows);                       // atoll's own, column-major: a column
}

namespace {

// A tensor, or a block of whole rows of one, before it is placed.
struct Item {
  int tensor;
  size_t begin;  // floats into the tensor
  size_t size;
};

// Whole tensors up to `target` floats; larger ones in blocks of as many whole
// rows as fit in `target` (at least one), the remainder a block of its own.
// Blocks of about the target fill a fragment each, and the remainders pack
// with the small tensors; equal parts (size / ceil(size / target)) would
// leave every fragment short and the last ones doubled.
std::vector<Item> items_of(const ParamLayout& layout, size_t target) {
  std::vector<Item> items;
  for (int t = 0; t < layout.count(); ++t) {
    const auto& spec = layout.tensor(t);
    const size_t size = spec.size();
    if (size <= target) {
      items.push_back({t, 0, size});
      continue;
    }
    const size_t row = row_floats(spec);
    const size_t block = std::max<size_t>(1, target / row) * row;
    for (size_t begin = 0; begin < size; begin += block) items.push_back({t, begin, std::min(block, size - begin)});
  }
  return items;
}

}  // namespace

Result<std::vector<Fragment>> plan_fragments(const ParamLayout& layout, int count, int syncer_shards) {
  if (count < 1)
    return Status::invalid_argument("fragments must be at least 1, got " + std::to_string(count));
  if (count > layout.count())
    return Status::invalid_argument("fragments (" + std::to_string(count) +
                                    ") exceeds the model's tensors (" +
                                    std::to_string(layout.count()) + "): a fragment would be empty");

  // One syncer: no tensor is above a target of the whole model, so none is split.
  const auto n = static_cast<size_t>(count);
  const size_t target = syncer_shards > 1 ? (layout.size() + n - 1) / n : layout.size();
  std::vector<Item> items = items_of(layout, target);
  std::sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    if (a.size != b.size) return a.size > b.size;
    const auto& na = layout.tensor(a.tensor).name;
    const auto& nb = layout.tensor(b.tensor).name;
    if (na != nb) return na < nb;
    return a.begin < b.begin;
  });

  // At least `count` items, each of at least one float: the first `count`
  // go to distinct empty fragments, so none stays empty.
  std::vector<std::vector<Item>> members(static_cast<size_t>(count));
  std::vector<size_t> load(static_cast<size_t>(count), 0);
  for (const Item& item : items) {
    const auto lightest = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    members[lightest].push_back(item);
    load[lightest] += item.size;
  }

  std::vector<Fragment> fragments(static_cast<size_t>(count));
  for (int p = 0; p < count; ++p) {
    auto& f = fragments[static_cast<size_t>(p)];
    auto& ms = members[static_cast<size_t>(p)];
    std::sort(ms.begin(), ms.end(), [](const Item& a, const Item& b) {
      return a.tensor != b.tensor ? a.tensor < b.tensor : a.begin < b.begin;
    });
    f.id = p;
    // A head or embedding is averaged, and so is every whole tensor beside it
    // (the rule plans of whole tensors always had); a block of a split body
    // tensor is merged by RDA wherever it was packed.
    const bool holds_head = std::any_of(ms.begin(), ms.end(), [&](const Item& m) {
      return layout.tensor(m.tensor).role != TensorRole::kBody;
    });
    bool all_averaged = true;
    for (const Item& m : ms) {
      const auto& spec = layout.tensor(m.tensor);
      const bool whole = m.size == spec.size();
      const bool avg = spec.role != TensorRole::kBody || (holds_head && whole);
      const MergeRule rule = avg ? MergeRule::kAvg : MergeRule::kRda;
      f.pieces.push_back({m.tensor, spec.offset + m.begin, f.size, m.size, m.begin, rule});
      f.size += m.size;
      all_averaged &= avg;
    }
    f.rule = all_averaged ? MergeRule::kAvg : MergeRule::kRda;
  }
  return fragments;
}

std::string describe_splits(const ParamLayout& layout, const std::vector<Fragment>& fragments) {
  std::vector<int> blocks(static_cast<size_t>(layout.count()), 0);
  for (const auto& f : fragments)
    for (const auto& piece : f.pieces) ++blocks[static_cast<size_t>(piece.tensor)];
  std::string s;
  for (int t = 0; t < layout.count(); ++t) {
    const int n = blocks[static_cast<size_t>(t)];
    if (n > 1) s += (s.empty() ? "" : ", ") + layout.tensor(t).name + " in " + std::to_string(n) + " blocks";
  }
  return s;
}

std::vector<size_t> shard_parameters(const std::vector<Fragment>& fragments, int syncer_shards) {
  std::vector<size_t> held(static_cast<size_t>(std::max(1, syncer_shards)), 0);
  for (const auto& f : fragments) held[shard_of(static_cast<uint32_t>(f.id), syncer_shards)] += f.size;
  return held;
}

std::string describe_merge_rules(const ParamLayout& layout, const std::vector<Fragment>& fragments) {
  std::vector<char> in_avg(static_cast<size_t>(layout.count()), 0);
  std::string named;  // the heads and embeddings averaged, in plan order
  int named_count = 0, avg_fragments = 0, avg_tensors = 0;
  for (const auto& f : fragments) {
    bool averaged = false;
    for (const auto& piece : f.pieces) {
      if (piece.rule != MergeRule::kAvg) continue;
      averaged = true;
      if (std::exchange(in_avg[static_cast<size_t>(piece.tensor)], 1)) continue;  // a split tensor counts once
      ++avg_tensors;
      if (layout.tensor(piece.tensor).role == TensorRole::kBody) continue;
      if (named_count++ < 6) named += (named.empty() ? "" : ", ") + layout.tensor(piece.tensor).name;
    }
    avg_fragments += averaged ? 1 : 0;
  }
  const int total = layout.count();
  bool has_embedding = false;
  for (int t = 0; t < total; ++t) has_embedding |= layout.tensor(t).role != TensorRole::kBody;
  if (avg_fragments == 0 && has_embedding)  // the topology forced RDA (outer.force_rda)
    return "RDA for all " + std::to_string(total) + " tensors, the embeddings and output heads too";
  if (avg_fragments == 0)
    return "RDA for all " + std::to_string(total) + " tensors: none is an embedding or output head by model.avg " +
           "(a model that has them wants their names there)";
  if (named_count > 6) named += " and " + std::to_string(named_count - 6) + " more";
  if (named.empty()) named = "every tensor";  // outer.force_avg on a model without heads
  std::string s = "weighted mean for " + named + " (" + std::to_string(avg_fragments) + " of " +
                  std::to_string(fragments.size()) + " fragments";
  if (avg_tensors > named_count && named_count > 0) s += ", " + std::to_string(avg_tensors) + " tensors with those beside them";
  s += ")";
  const int rda_only = total - avg_tensors;
  if (rda_only == 1) s += "; RDA for the other tensor";
  else if (rda_only > 1) s += "; RDA for the other " + std::to_string(rda_only) + " tensors";
  return s;
}

size_t averaged_floats(const Fragment& fragment) {
  size_t n = 0;
  for (const auto& piece : fragment.pieces) n += piece.rule == MergeRule::kAvg ? piece.size : 0;
  return n;
}

void force_rule(Fragment& fragment, MergeRule rule) {
  fragment.rule = rule;
  for (auto& piece : fragment.pieces) piece.rule = rule;
}

uint64_t plan_fingerprint(const std::vector<Fragment>& fragments) {
  Fnv1a f;
  f.value<uint64_t>(fragments.size());
  for (const auto& fragment : fragments) {
    f.value<int32_t>(fragment.id);  // not the rule: a vector means the same merged by either
    f.value<uint64_t>(fragment.pieces.size());
    for (const auto& piece : fragment.pieces) {
      f.value<int32_t>(piece.tensor);
      f.value<uint64_t>(piece.tensor_offset);
      f.value<uint64_t>(piece.size);
      f.value<uint64_t>(piece.fragment_offset);
    }
  }
  return f.h;
}

uint64_t steps_until_due(int fragment, int fragments, int stream, int sync_every, uint64_t version) {
  if (version > 0) return static_cast<uint64_t>(sync_every);
  const int k = std::clamp(stream, 1, std::max(1, fragments));
  const int groups = (fragments + k - 1) / k;
  const auto due = static_cast<uint64_t>(fragment / k + 1) * static_cast<uint64_t>(sync_every) /
                   static_cast<uint64_t>(groups);
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
