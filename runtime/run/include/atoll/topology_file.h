// Topology files (TOML) and command-line overrides.
//
//   mode = "decoupled"          # decoupled | dp | elastic_dp
//   tokens = 2000000
//   [outer]
//   quorum = 1
//   [[learners]]
//   speed = 1.0
//   batch_size = 64
//
// Keys and tables mirror atoll::Topology (atoll/topology.h); a key left out
// keeps its default. Unknown keys, wrong types and out-of-range values are
// errors naming the file, the line and the key:
//   "topo.toml:12: outer.quorm: unknown key (did you mean outer.quorum?)"
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "atoll/status.h"
#include "atoll/topology.h"

namespace atl {

// Topology and fault-plan files are a few KB; anything past this is refused
// before it is parsed (a huge array would take seconds and gigabytes).
inline constexpr size_t kMaxConfigFileBytes = size_t{1} << 20;

// Reads `path` (empty: the built-in default topology), then applies each
// override "key=value" in order, e.g. "outer.quorum=2", "mode=dp",
// "learners=[{speed=1.0},{speed=0.5}]". The value is TOML; a bare word is
// taken as a string. The result is validated.
Result<Topology> load_topology(const std::string& path, const std::vector<std::string>& overrides = {});

// The same from text; `source` names it in errors.
Result<Topology> parse_topology(std::string_view text, const std::string& source,
                                const std::vector<std::string>& overrides = {});

// Every key with its value, as a topology file that load_topology() reads back
// to the same Topology.
std::string to_toml(const Topology& topology);

// The same keys and values as one JSON object (what the Python package's
// Topology.to_dict() reads: no TOML parser needed on Python 3.10).
std::string to_json(const Topology& topology);

}  // namespace atl
