#!/usr/bin/env bash
# Signals and bad arguments on the command line: Ctrl-C or SIGTERM
# on `atoll run --processes` ends the run in order, with its report and no
# child left behind, as does SIGKILL of the parent; Ctrl-C on `atoll run
# --faults` still writes the summary, the tape and the report; arguments that
# make no sense are refused with exit 2 and the reason.
# Usage: signals_test.sh ATOLL SCRATCH
source "$(dirname "$0")/lib.sh" "$1" "$2"

write_topology "$work/topo.toml" 1000000000  # ended by the test

# children PARENT_PID: how many atoll processes PARENT_PID has.
children() { pgrep -P "$1" -c -f "atoll (syncer|learner)" || true; }
# child_pids PARENT_PID: their pids. The checks below follow these pids, not a
# pattern: other tests running beside this one have atoll children of their own.
child_pids() { pgrep -P "$1" -f "atoll (syncer|learner)" || true; }
# alive PIDS...: the pids of PIDS still running as atoll (not gone, not a zombie).
alive() {
  local p
  for p in "$@"; do
    [[ -r "/proc/$p/cmdline" ]] && tr '\0' ' ' <"/proc/$p/cmdline" | grep -q "atoll" && echo "$p"
  done
  return 0
}

# Starts `atoll run --processes` and waits until its learners joined (the syncer's log line).
start_processes() {  # NAME
  "$atoll" run "$work/topo.toml" --processes -v --report "$work/$1.json" >"$work/$1.log" 2>&1 &
  pids+=($!)
  eval "${1}_pid=$!"
  wait_for "$1" "learner 1 registered" 60
}

for signal in INT TERM; do
  start_processes "processes_$signal"
  pid_var="processes_${signal}_pid"
  parent=${!pid_var}
  (($(children "$parent") == 3)) || die "expected 3 child processes of $parent, found $(children "$parent")"
  mapfile -t kids < <(child_pids "$parent")
  kill -"$signal" "$parent"
  expect_exit "$parent" 60 0 "atoll run --processes after SIG$signal"
  [[ -s "$work/processes_$signal.json" ]] || die "no report after SIG$signal"
  left=$(alive "${kids[@]}")
  [[ -z "$left" ]] || die "child processes left after SIG$signal: $left"
done

# The parent killed outright: its children notice (parent-death signal) and stop.
start_processes processes_KILL
mapfile -t kids < <(child_pids "$processes_KILL_pid")
((${#kids[@]} == 3)) || die "expected 3 child processes of $processes_KILL_pid, found ${#kids[@]}"
kill -KILL "$processes_KILL_pid"
for _ in $(seq 100); do
  [[ -z "$(alive "${kids[@]}")" ]] && break
  sleep 0.1
done
left=$(alive "${kids[@]}")
[[ -z "$left" ]] || die "child processes outlived a SIGKILLed parent by 10 s: $left"

# Ctrl-C during a chaos run: the run stops in order and says what it could.
cat >"$work/plan.toml" <<TOML
topology = "topo.toml"
seconds = 60
[[fault]]
kind = "kill"
at = 0.5
learner = 0
recover_after = 0.2
TOML
"$atoll" run "$work/topo.toml" --faults "$work/plan.toml" --tape "$work/tape.jsonl" --report "$work/faults.json" \
  >"$work/faults.log" 2>&1 &
faults_pid=$!
pids+=("$faults_pid")
for _ in $(seq 300); do
  grep -q '"event":"recovered"' "$work/tape.jsonl" 2>/dev/null && break
  sleep 0.1
done
kill -INT "$faults_pid"
expect_exit "$faults_pid" 60 130 "atoll run --faults after Ctrl-C"
grep -q "interrupted" "$work/faults.log" || die "the chaos summary does not say it was interrupted"
[[ -s "$work/faults.json" ]] || die "no report after Ctrl-C of a chaos run"
[[ -s "$work/tape.jsonl" ]] || die "no event tape after Ctrl-C of a chaos run"

# Arguments that make no sense: exit 2, naming the option.
refuse() {  # PATTERN ARGS...
  local pattern=$1 status=0
  shift
  "$atoll" "$@" >"$work/refused.log" 2>&1 || status=$?
  ((status == 2)) || die "'atoll $*' exited with $status, not 2"
  grep -q -- "$pattern" "$work/refused.log" || die "'atoll $*' did not say '$pattern'"
}
for value in -1 nan inf 0; do refuse "--seconds" run "$work/topo.toml" --seconds "$value"; done
refuse "--threads" run "$work/topo.toml" --threads -3
refuse "is a folder, not a file" run "$work"
refuse "is a folder, not a file" validate "$work"
refuse "cannot open" validate "$work/topo.toml" --set data.kind=\"mnist\" --set model.kind=\"mlp\" --data "$work/none"
# A fault plan with nothing to inject would only run its topology (the default job: minutes).
printf 'name = "nothing"\nseconds = 3\n' > "$work/empty_plan.toml"
refuse "injects no fault" chaos "$work/empty_plan.toml"
echo "signals_test: ok (SIGINT, SIGTERM and SIGKILL leave no child; Ctrl-C of a chaos run writes its report)"
