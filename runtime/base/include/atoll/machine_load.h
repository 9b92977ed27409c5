// Machine load: how much of the machine's CPU something other than this
// process took while a run ran.
//
// Dedicated hardware (atoll/step_pacer.h) assumes the cores are the run's
// own. Another process, or the hypervisor of a virtual machine (steal time),
// can take them anyway; that slows a decoupled run unevenly and so moves its
// timing, and with it its quality (docs/benchmarks.md, "Against model size").
// A run records the load so that a comparison can tell such a run from a
// clean one. Read from Linux's /proc/stat and this process's CPU time; the
// run's learner processes on the same machine (they say their machine and
// their CPU time in each Progress) are the run's own, not others.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "atoll/status.h"

namespace atl {

// The machine's CPU time since boot, summed over its cores, in seconds, and
// this process's.
struct CpuSample {
  double busy = 0;     // user, nice, system, irq, softirq (guest time is inside user)
  double idle = 0;     // idle and iowait
  double steal = 0;    // taken by the hypervisor for other virtual machines
  double process = 0;  // this process's user and system time
  // The run's own processes besides this one on this machine (its learners
  // in processes of their own): their CPU time as they last reported it.
  double run_processes = 0;
};

// Over an interval: shares of the machine's CPU time (every core), 0 to 1.
struct MachineLoad {
  double others = 0;  // busy in processes other than the run's
  double steal = 0;
};

// Parses /proc/stat's aggregate "cpu" line (the first line) into busy, idle
// and steal, with `ticks_per_second` (USER_HZ) the unit of its counters.
// Fails naming what is missing or not a number.
Result<CpuSample> parse_proc_stat(std::string_view text, double ticks_per_second);

// Now: the machine's counters and this process's CPU time; nullopt where
// /proc/stat cannot be read (not Linux).
std::optional<CpuSample> sample_cpu();

// The load between two samples (`end` taken after `begin`); zero shares when
// no CPU time passed.
MachineLoad load_between(const CpuSample& begin, const CpuSample& end);

// This process's CPU time (user and system, every thread), in seconds.
double process_cpu_seconds();

// This machine among a run's processes: a hash of the kernel's boot id, one
// per boot of a machine and shared by its containers (whose /proc/stat is
// the machine's too); 0 where it cannot be read.
uint64_t machine_id();

}  // namespace atl
