# shellcheck shell=bash
# tests/deploy/slurm_job.sh -- what a test of examples/deploy/slurm/atoll.sbatch
# on the test cluster (slurm_cluster.sh) does with the job: fail showing its
# logs, wait for a line in one. Source it after setting:
#   work     the test's scratch folder: the job's files in $work/shared
#            (logs/*.log) and its output in $work/atoll-*.out
#   overall  the SECONDS by which every wait gives up (under CTest's timeout)
#
#   die WHY...                         print FAILED: WHY, the last 30 lines of
#                                      every log of the job, and exit 1
#   wait_log FILE PATTERN SECONDS [N]  until PATTERN is in FILE N times (1);
#                                      die after SECONDS or at $overall

die() {
  echo "FAILED: $*" >&2
  for f in "$work"/shared/logs/*.log "$work"/atoll-*.out; do
    [ -f "$f" ] && { echo "---- $f (last 30 lines)" >&2; tail -n 30 "$f" >&2; }
  done
  exit 1
}

wait_log() {
  local file=$1 pattern=$2 seconds=$3 count=${4:-1}
  local deadline=$((SECONDS + seconds))
  ((deadline < overall)) || deadline=$overall
  while ((SECONDS < deadline)); do
    local seen
    seen=$(grep -c -- "$pattern" "$file" 2>/dev/null || true)
    ((${seen:-0} >= count)) && return 0
    sleep 0.5
  done
  die "no '$pattern' (x$count) in $file within $seconds s"
}
