#!/usr/bin/env bash
# Chaos plans while two busy loops keep both cores busy: the learners get a
# fraction of the CPU and every invariant must still hold. It also checks that
# the load was real: each loop got a share of a core.
#   chaos_under_load.sh ATOLL OUT_DIR PLAN...
set -uo pipefail
atoll=$1 out=$2
shift 2
plans=("$@")
ticks=$(getconf CLK_TCK)

busy=()
for _ in 1 2; do
  (while :; do :; done) &
  busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT

start=$SECONDS
"$atoll" chaos "${plans[@]}" --report "$out/chaos-under-load.json" --tapes "$out/chaos-under-load-tapes"
status=$?
wall=$((SECONDS - start))

for pid in "${busy[@]}"; do
  # utime + stime: fields 14 and 15 of /proc/PID/stat, in clock ticks
  if ! awk -v t="$ticks" -v wall="$wall" -v pid="$pid" '{
         cpu = ($14 + $15) / t; share = wall > 0 ? cpu / wall : 0
         printf "busy loop %s: %.1f s of CPU in %d s (%.0f%% of a core)\n", pid, cpu, wall, 100 * share
         exit share < 0.25 }' "/proc/$pid/stat"; then
    echo "chaos_under_load: a loop got under 25% of a core: the machine was not loaded" >&2
    status=1
  fi
done
exit "$status"
