// Topology TOML (runtime/topology_file.cc): any text is a valid topology or
// an error; a valid one prints as TOML that reads back to the same topology.
#include "atoll/topology_file.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > atl::kMaxConfigFileBytes) return 0;
  auto t = atl::parse_topology(atl::fuzz::text(data, size), "fuzz.toml");
  if (!t.ok()) return 0;
  auto back = atl::parse_topology(atl::to_toml(*t), "printed.toml");
  atl::fuzz::expect(back.ok() && *back == *t);
  return 0;
}
