#include "atoll/module_layout.h"

#include <fnmatch.h>

#include <algorithm>
#include <set>

namespace atl {
namespace {

bool matches_any(const std::string& name, const std::vector<std::string>& globs) {
  return std::any_of(globs.begin(), globs.end(),
                     [&](const std::string& g) { return fnmatch(g.c_str(), name.c_str(), 0) == 0; });
}

constexpr int64_t kMaxTensorValues = (int64_t{1} << 31) - 1;

}  // namespace

Result<ParamLayout> module_layout(const std::vector<NamedShape>& tensors, const std::vector<std::string>& avg) {
  ParamLayout layout;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    const std::string what = "parameter " + describe_shape(t);
    if (t.name.empty()) return Status::invalid_argument("a parameter has an empty name");
    if (!names.insert(t.name).second) return Status::invalid_argument(what + ": the name is given twice");
    std::vector<int64_t> dims = t.dims.empty() ? std::vector<int64_t>{1} : t.dims;
    int64_t values = 1;
    for (int64_t d : dims) {
      if (d < 1) return Status::invalid_argument(what + ": every dimension must be at least 1");
      if (values > kMaxTensorValues / d)
        return Status::invalid_argument(what + ": more than 2^31 - 1 values in one tensor");
      values *= d;
    }
    const auto role = matches_any(t.name, avg) ? TensorRole::kEmbedding : TensorRole::kBody;
    layout.add(t.name, std::move(dims), role, /*decay=*/t.dims.size() >= 2);
  }
  return layout;
}

std::vector<NamedShape> shapes_of(const ParamLayout& layout) {
  std::vector<NamedShape> out;
  for (const auto& t : layout.tensors())
    out.push_back({t.name, t.dims.empty() ? std::vector<int64_t>{t.rows, t.cols} : t.dims});
  return out;
}

std::string describe_shape(const NamedShape& t) {
  std::string s = t.name + " [";
  for (size_t i = 0; i < t.dims.size(); ++i) s += (i ? ", " : "") + std::to_string(t.dims[i]);
  return s + "]";
}

std::string layout_difference(const std::vector<NamedShape>& ours, const std::vector<NamedShape>& theirs,
                              const std::string& our_name, const std::string& their_name) {
  if (ours == theirs) return "";
  std::string s = our_name + " has " + std::to_string(ours.size()) + " tensors, " + their_name + " " +
                  std::to_string(theirs.size());
  int shown = 0;
  for (size_t i = 0; i < std::max(ours.size(), theirs.size()) && shown < 3; ++i) {
    const NamedShape* a = i < ours.size() ? &ours[i] : nullptr;
    const NamedShape* b = i < theirs.size() ? &theirs[i] : nullptr;
    if (a && b && *a == *b) continue;
    s += "; tensor " + std::to_string(i) + ": " + our_name + " " + (a ? describe_shape(*a) : "(none)") + ", " +
         their_name + " " + (b ? describe_shape(*b) : "(none)");
    ++shown;
  }
  return s;
}

}  // namespace atl
