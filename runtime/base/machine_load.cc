#include "atoll/machine_load.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <fstream>
#include <string>

#include "atoll/fnv1a.h"

namespace atl {

Result<CpuSample> parse_proc_stat(std::string_view text, double ticks_per_second) {
  const std::string_view line = text.substr(0, text.find('\n'));
  if (!line.starts_with("cpu "))
    return Status::corruption("/proc/stat: the first line is not the aggregate \"cpu\" line");
  // user nice system idle iowait irq softirq steal [guest guest_nice]: guest
  // time is counted in user already, so the first eight are the whole.
  static constexpr const char* kNames[] = {"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"};
  double ticks[8] = {};
  size_t at = 3;
  for (int i = 0; i < 8; ++i) {
    at = line.find_first_not_of(' ', at);
    if (at == std::string_view::npos)
      return Status::corruption(std::string("/proc/stat: the cpu line ends before its ") + kNames[i] + " field");
    const size_t end = std::min(line.find(' ', at), line.size());
    uint64_t v = 0;
    const auto [ptr, ec] = std::from_chars(line.data() + at, line.data() + end, v);
    if (ec != std::errc() || ptr != line.data() + end)
      return Status::corruption(std::string("/proc/stat: the cpu line's ") + kNames[i] + " field is not a count: '" +
                                std::string(line.substr(at, end - at)) + "'");
    ticks[i] = static_cast<double>(v) / ticks_per_second;
    at = end;
  }
  CpuSample s;
  s.busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6];
  s.idle = ticks[3] + ticks[4];
  s.steal = ticks[7];
  return s;
}

std::optional<CpuSample> sample_cpu() {
  std::ifstream in("/proc/stat");
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  auto s = parse_proc_stat(line, static_cast<double>(sysconf(_SC_CLK_TCK)));
  if (!s.ok()) return std::nullopt;
  s->process = process_cpu_seconds();
  return *s;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

uint64_t machine_id() {
  static const uint64_t id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string text;
    if (!in || !std::getline(in, text) || text.empty()) return uint64_t{0};
    Fnv1a h;  // a name, not a secret
    h.bytes(text.data(), text.size());
    return h.h == 0 ? 1 : h.h;
  }();
  return id;
}

MachineLoad load_between(const CpuSample& begin, const CpuSample& end) {
  const double busy = end.busy - begin.busy, steal = end.steal - begin.steal;
  const double total = busy + (end.idle - begin.idle) + steal;
  if (total <= 0) return {};
  // The process's clock and the machine's ticks differ in resolution: clamp.
  const double own = (end.process - begin.process) + (end.run_processes - begin.run_processes);
  const double others = std::clamp(busy - own, 0.0, total);
  return {others / total, std::max(0.0, steal) / total};
}

}  // namespace atl
