#include "atoll/message_faults.h"

#include <algorithm>

namespace atl {

const char* link_fault_name(LinkFaultKind k) {
  switch (k) {
    case LinkFaultKind::kDrop: return "partition";
    case LinkFaultKind::kDelay: return "delay";
    case LinkFaultKind::kDuplicate: return "duplicate";
    case LinkFaultKind::kReorder: return "reorder";
    case LinkFaultKind::kCorrupt: return "corrupt";
  }
  return "unknown";
}

void MessageFaults::add(const LinkFault& fault) {
  std::lock_guard lock(mu_);
  faults_.push_back(fault);
  active_.store(true, std::memory_order_relaxed);
}

std::array<uint64_t, 5> MessageFaults::affected() const {
  std::lock_guard lock(mu_);
  return affected_;
}

std::vector<MessageFaults::Delivery> MessageFaults::route(uint32_t learner, std::vector<uint8_t> bytes,
                                                          std::chrono::steady_clock::time_point now) {
  std::vector<Delivery> out;
  out.push_back({0.0, std::move(bytes)});
  std::lock_guard lock(mu_);
  std::erase_if(faults_, [&](const LinkFault& f) { return f.until <= now; });
  for (const auto& f : faults_) {
    if (now < f.from || (f.learner >= 0 && static_cast<uint32_t>(f.learner) != learner)) continue;
    if (f.probability < 1.0 && rng_.uniform() >= f.probability) continue;
    ++affected_[static_cast<size_t>(f.kind)];
    switch (f.kind) {
      case LinkFaultKind::kDrop:
        out.clear();
        return out;
      case LinkFaultKind::kDelay:
        for (auto& d : out) d.delay_seconds += f.seconds;
        break;
      case LinkFaultKind::kReorder:
        for (auto& d : out) d.delay_seconds += rng_.uniform(0.0, f.seconds);
        break;
      case LinkFaultKind::kDuplicate:
        out.push_back(out.front());
        break;
      case LinkFaultKind::kCorrupt:
        for (auto& d : out)
          if (!d.bytes.empty()) d.bytes[rng_.below(d.bytes.size())] ^= static_cast<uint8_t>(1 + rng_.below(255));
        break;
    }
  }
  return out;
}

}  // namespace atl
