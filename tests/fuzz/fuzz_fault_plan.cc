// Fault-plan TOML (chaos/fault_plan.cc): any text is a plan or an error.
// The plan is read as if it sat in examples/chaos/, so that the seeds'
// relative topology paths name real files and the fuzzer gets past them.
#include "atoll/fault_plan.h"
#include "atoll/topology_file.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = atl::fuzz::text(data, size);
  // A plan may name any file as its topology or tape; device files such as
  // /dev/stdin would block by design, which is not a finding.
  if (size > atl::kMaxConfigFileBytes || text.find("/dev") != text.npos || text.find("/proc") != text.npos ||
      text.find("/sys") != text.npos)
    return 0;
  auto plan = atl::parse_fault_plan(text, ATOLL_SOURCE_DIR "/examples/chaos/fuzz.toml");
  if (plan.ok())
    for (const auto& f : plan->faults)
      atl::fuzz::expect(f.learner < static_cast<int>(atl::learner_slots(plan->topology)));  // open slots too
  return 0;
}
