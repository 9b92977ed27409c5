# shellcheck shell=bash
# tests/deploy/slurm_cluster.sh -- a real one-host Slurm cluster for tests,
# made of Debian's packages (slurm-wlm 22.05, munge), living in one folder.
#
# Source this file (bash), then:
#
#   slurm_start DIR CPUS   start munged + slurmctld + slurmd; munge key and
#                          socket, slurm.conf, state, spool, logs, pid files
#                          all under DIR (created; no white space in it; old
#                          DIR/{run,log,state,spool,munge,tmp,jobcomp.log}
#                          removed).  Exports SLURM_CONF, so sbatch/srun/
#                          squeue/scontrol/scancel/sinfo in this shell and its
#                          children use this cluster (the munge socket is in
#                          slurm.conf: AuthInfo=socket=...).  Waits (<=
#                          SLURM_START_TIMEOUT s, default 60) until the node
#                          is IDLE.  On failure: says what failed, prints the
#                          daemons' logs to stderr, returns != 0 (and leaves
#                          what did start to slurm_stop).
#   slurm_stop [DIR]       stop the cluster of DIR (default: the last one
#                          started in this shell): TERM the daemons, KILL this
#                          cluster's slurmstepd's and every job process under
#                          them, KILL daemons still alive after
#                          SLURM_STOP_TIMEOUT s (default 10).  Idempotent, a
#                          no-op when nothing runs, fine after a failed start.
#                          Returns 1 only if something survives KILL.
#   slurm_wait_job JOBID SECONDS
#                          wait until the job has left the queue (COMPLETING
#                          included); print one line
#                            JobId=N JobState=STATE ExitCode=E:S
#                          and return 0 iff COMPLETED with ExitCode 0:0,
#                          1 for any other final state, 2 on timeout or for a
#                          job that this cluster does not know.
#   slurm_step_pids JOBID STEPID [TASKID]
#                          print the PIDs (one a line) of a running step's
#                          processes on this node: all of them, or only those
#                          of the task with global rank TASKID (SLURM_PROCID):
#                          the task's own process and its descendants.
#                          STEPID is a number, "batch" or "extern".
#
# Also exported by slurm_start: SLURM_CLUSTER_DIR, SLURM_CLUSTER_NODE (the
# node name = `hostname -s`), SLURM_CLUSTER_CTLD_PORT, SLURM_CLUSTER_SLURMD_PORT.
#
# What was measured (Debian 12, slurm-wlm 22.05.8, munge 0.5.15, 2 cores,
# root, Firecracker VM; measured with a self-test while writing this library,
# not kept: tests/deploy/slurm_test.sh exercises what atoll relies on):
#
# * Start: slurm_start returns after 0.2-1.3 s (12 runs: either ~0.2 s or
#   ~1.2 s; munged answers at once, slurmctld runs in ~10 ms, the rest is the
#   node getting IDLE; polled every 0.2 s).  slurm_stop: 1.4-1.8 s (each
#   daemon needs ~1.5 s after TERM, all TERMed at once; then PID 1 reaps).
#   The self-test takes ~35 s, mostly sleeping.
# * Job exit code = the batch script's own exit status.  A task failing in a
#   step does not fail the job: `srun ... & ... wait` (bare `wait` returns 0)
#   gives COMPLETED ExitCode=0:0.  srun exits with the highest exit code of
#   its tasks (3 here), so `srun ...; exit $?` / `wait $pid; exit $?` makes
#   the job FAILED ExitCode=3:0.  A task killed by SIGKILL makes srun exit
#   137 (128+9) and print "srun: error: NODE: task 1: Killed" at once and
#   "srun: Force Terminated StepId=J.S" when the step ends (a message only,
#   nothing is killed).  Without accounting there is no DerivedExitCode
#   (scontrol does not show it; jobcomp writes 0:0), so the batch script must
#   propagate srun's status if a test wants to see step failures.
# * --kill-on-bad-exit=0 (KillOnBadExit is 0 by default too): when task 1
#   exits 3, or is killed with kill -9, the other tasks of the step run on to
#   their own end.  Two `srun --exact ... &` steps in one allocation run at
#   the same time.
# * A task's processes: `scontrol listpids JOBID.STEPID NODE`, run on the
#   node, asks the step's slurmstepd (socket in SlurmdSpoolDir); it prints
#   "PID JOBID STEPID LOCALID GLOBALID"; GLOBALID is SLURM_PROCID for a task's
#   first process (what srun exec'd: `bash -c 'exec prog'` -> prog) and "-"
#   for its descendants (proctrack/linuxproc follows the process tree).
#   slurm_step_pids JOB STEP TASK wraps it, adding the task's descendants.
#   Task processes also have SLURM_JOB_ID, SLURM_STEP_ID, SLURM_PROCID and
#   SLURM_CONF=DIR/slurm.conf in /proc/PID/environ (even with --export=NONE).
# * Node name resolving to 127.0.0.1 (hostname vm, `getent hosts vm` ->
#   127.0.0.1): no problem; sbatch, srun inside the batch script (steps,
#   I/O forwarding to the output file) all work.  The config names the
#   address explicitly anyway (SlurmctldHost=NODE(127.0.0.1), NodeAddr).
# * No accounting: sacct fails.  `scontrol show job` knows a finished job for
#   MinJobAge=300 s; jobcomp/filetxt appends every finished job to
#   DIR/jobcomp.log ("JobId=N ... JobState=X ... ExitCode=E:S"), which
#   slurm_wait_job reads when slurmctld no longer knows the job.
# * Processes: the daemons are double-forked (not jobs of the calling shell:
#   a bare `wait` in a test does not hang on them), run in DIR/run, and carry
#   SLURM_CLUSTER_MARK=DIR in their environment.  slurmstepd rewrites its
#   argv/environ area (setproctitle: "slurmstepd: [J.S]"), so it is found as
#   a process named slurmstepd whose cwd is DIR/run (inherited from slurmd)
#   or which holds DIR/log/slurmd.log open; job processes are its
#   descendants, plus (orphans, e.g. after a stepd was killed) any process
#   with SLURM_JOB_ID, SLURM_CLUSTER_NAME=atolltest and
#   SLURM_CONF=DIR/slurm.conf in its environment.  Nothing is killed by name
#   alone.  Zombies of the killed daemons are reaped by PID 1 (here lazily,
#   < 2 s); slurm_stop waits for that (bounded) so that `pgrep` is clean.
# * Config quirks: clients need only SLURM_CONF: auth/munge and cred/munge
#   both take the socket from AuthInfo=socket=DIR/munge/munge.sock (no
#   AuthAltTypes, no other variable needed).  CPUs above the real core count need
#   SlurmdParameters=config_overrides (slurmd logs "Node configuration
#   differs from hardware" and registers the configured CPUs).  No
#   cgroup.conf needed with ProctrackType=proctrack/linuxproc +
#   TaskPlugin=task/none.  MailProg=/bin/true silences "Configured MailProg
#   is invalid".  PlugStackConfig points to an empty file so that
#   /etc/slurm/plugstack.conf is never read.  slurmctld -c -i: cold start.
#   Harmless noise in the logs: "mpi/pmix_v4: can not load PMIx library"
#   (slurmd loads every MPI plugin), "Could not open job state file" (cold
#   start).  srun passes the program by full path: a task started with
#   `srun sleep 5` shows as "/usr/bin/sleep 5" in ps.

_SLURM_CLUSTER_NAME=atolltest

_slurm_log() { printf 'slurm_cluster: %s\n' "$*" >&2; }

_slurm_now() { printf '%s' "${EPOCHSECONDS:-$(date +%s)}"; }

# _slurm_alive PID: PID exists and is not a zombie.
_slurm_alive() {
  local st
  [[ -n "${1:-}" ]] || return 1
  { read -r st <"/proc/$1/stat"; } 2>/dev/null || return 1
  st=${st##*) }
  [[ "${st:0:1}" != Z ]]
}

# _slurm_exists PID: PID exists, zombie or not.
_slurm_exists() { [[ -n "${1:-}" && -e "/proc/$1" ]]; }

# _slurm_is_ours PID DIR: PID carries our mark (daemons we spawned).
_slurm_is_ours() {
  [[ -n "${1:-}" ]] && grep -qzxF "SLURM_CLUSTER_MARK=$2" "/proc/$1/environ" 2>/dev/null
}

# _slurm_self_pids: this shell and its ancestors, never to be killed.
_slurm_self_pids() {
  local p=$BASHPID line rest
  echo "$$"
  while [[ -n "$p" && "$p" != 0 ]]; do
    echo "$p"
    { read -r line <"/proc/$p/stat"; } 2>/dev/null || break
    rest=${line##*) }
    rest=${rest#* }
    p=${rest%% *}
  done
}

# _slurm_our_pids DIR: every process of the cluster of DIR: the daemons
# (mark), its slurmstepd's (cwd DIR/run or DIR/log/slurmd.log open), and
# job processes (SLURM_CONF=DIR/slurm.conf, SLURM_CLUSTER_NAME=atolltest and
# SLURM_JOB_ID in environ; Slurm sets all three in every job's environment).
# Excludes this shell and its ancestors.
_slurm_our_pids() {
  local dir=$1 p f
  {
    grep -lzxF "SLURM_CLUSTER_MARK=$dir" /proc/[0-9]*/environ 2>/dev/null |
      sed -e 's|^/proc/||' -e 's|/environ$||'
    for p in $(pgrep -x slurmstepd); do
      if [[ "$(readlink "/proc/$p/cwd" 2>/dev/null)" == "$dir/run" ]]; then
        echo "$p"
        continue
      fi
      for f in "/proc/$p/fd/"*; do
        if [[ "$(readlink "$f" 2>/dev/null)" == "$dir/log/slurmd.log" ]]; then
          echo "$p"
          break
        fi
      done
    done
    # shellcheck disable=SC2013 # /proc paths have no spaces
    for f in $(grep -lzxF "SLURM_CONF=$dir/slurm.conf" /proc/[0-9]*/environ 2>/dev/null); do
      grep -qzx "SLURM_CLUSTER_NAME=$_SLURM_CLUSTER_NAME" "$f" 2>/dev/null &&
        grep -qz '^SLURM_JOB_ID=' "$f" 2>/dev/null && { p=${f#/proc/}; echo "${p%/environ}"; }
    done
  } | sort -un | grep -vxF -f <(_slurm_self_pids) || true
}

# _slurm_our_stepds DIR: the slurmstepd's among _slurm_our_pids.
_slurm_our_stepds() {
  local p
  for p in $(_slurm_our_pids "$1"); do
    [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == slurmstepd ]] && echo "$p"
  done
  return 0
}

# _slurm_descendants PID...: all descendants of the given PIDs.
_slurm_descendants() {
  local -A kids=()
  local stat pid ppid line rest p
  for stat in /proc/[0-9]*/stat; do
    { read -r line <"$stat"; } 2>/dev/null || continue
    # "pid (comm) state ppid ...": comm may contain spaces, cut at last ')'
    pid=${line%% *}
    rest=${line##*) }
    rest=${rest#* }
    ppid=${rest%% *}
    kids[$ppid]+=" $pid"
  done
  local -a queue=("$@")
  while ((${#queue[@]})); do
    pid=${queue[0]}
    queue=("${queue[@]:1}")
    for p in ${kids[$pid]:-}; do
      echo "$p"
      queue+=("$p")
    done
  done
  return 0
}

# _slurm_free_ports N: print N distinct free TCP ports, one a line.
_slurm_free_ports() {
  local n=$1
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$n" <<'EOF' 2>/dev/null && return 0
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("0.0.0.0", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
EOF
  fi
  # fallback: random ports in 20000-39999 that no socket uses now
  local used port got=0 tries=0
  used=$(ss -Htan 2>/dev/null | awk '{print $4}' | sed 's/.*://')
  while ((got < n && tries < 1000)); do
    tries=$((tries + 1))
    port=$((20000 + RANDOM % 20000))
    grep -qx "$port" <<<"$used" && continue
    echo "$port"
    used+=$'\n'$port
    got=$((got + 1))
  done
  ((got == n))
}

# _slurm_spawn DIR NAME CMD...: run CMD detached (double fork: not a job of
# this shell), in DIR/run, marked, stdout+stderr to DIR/log/NAME.out; its PID
# goes to DIR/run/NAME.pid.
_slurm_spawn() {
  local dir=$1 name=$2
  shift 2
  (
    cd "$dir/run" && SLURM_CLUSTER_MARK=$dir exec "$@" </dev/null >>"$dir/log/$name.out" 2>&1 &
    echo $! >"$dir/run/$name.pid"
  )
}

_slurm_pid_of() { cat "$1/run/$2.pid" 2>/dev/null || true; }

_slurm_dump_logs() {
  local dir=$1 f
  for f in "$dir"/log/*; do
    [[ -f "$f" ]] || continue
    echo "----- $f (last 40 lines) -----" >&2
    tail -n 40 "$f" >&2
  done
}

_slurm_fail() { # DIR MESSAGE
  _slurm_log "slurm_start FAILED: $2"
  _slurm_dump_logs "$1"
  _slurm_log "slurm_start FAILED: $2 (logs above; run slurm_stop)"
  return 1
}

# _slurm_write_conf DIR NODE CPUS CTLD_PORT SLURMD_PORT
_slurm_write_conf() {
  local dir=$1 node=$2 cpus=$3 cport=$4 dport=$5
  : >"$dir/plugstack.conf"
  cat >"$dir/slurm.conf" <<EOF
# generated by tests/deploy/slurm_cluster.sh
ClusterName=$_SLURM_CLUSTER_NAME
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$cport
SlurmdPort=$dport
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
# an empty SPANK config: never read /etc/slurm/plugstack.conf
PlugStackConfig=$dir/plugstack.conf
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
TmpFS=$dir/tmp
SlurmctldPidFile=$dir/run/slurmctld.own.pid
SlurmdPidFile=$dir/run/slurmd.own.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# CPUs may exceed the real cores: trust this file, not the hardware
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.log
MinJobAge=300
KillWait=2
InactiveLimit=0
WaitTime=0
# default /usr/bin/mail does not exist: "error: Configured MailProg is invalid"
MailProg=/bin/true
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

slurm_start() {
  if (($# != 2)); then
    _slurm_log "usage: slurm_start DIR CPUS"
    return 2
  fi
  local dir=$1 cpus=$2
  [[ "$cpus" =~ ^[1-9][0-9]*$ ]] || { _slurm_log "slurm_start: CPUS must be a positive integer, got '$cpus'"; return 2; }
  if [[ "$dir" =~ [[:space:]] ]]; then
    _slurm_log "slurm_start: DIR must not contain white space (slurm.conf paths): '$dir'"
    return 2
  fi
  local t0 timeout=${SLURM_START_TIMEOUT:-60} b
  t0=$(_slurm_now)
  for b in munged munge unmunge slurmctld slurmd scontrol; do
    command -v "$b" >/dev/null 2>&1 || { _slurm_log "slurm_start: '$b' not found in PATH"; return 1; }
  done
  mkdir -p "$dir" || { _slurm_log "slurm_start: cannot create $dir"; return 1; }
  dir=$(cd "$dir" && pwd -P) || return 1
  if [[ "$dir" =~ [[:space:]] ]]; then
    _slurm_log "slurm_start: DIR must not contain white space (slurm.conf paths): '$dir'"
    return 2
  fi
  if [[ -n "$(_slurm_our_pids "$dir")" ]]; then
    _slurm_log "slurm_start: a cluster already runs in $dir (slurm_stop $dir first): $(_slurm_our_pids "$dir" | tr '\n' ' ')"
    return 1
  fi
  SLURM_CLUSTER_DIR=$dir
  export SLURM_CLUSTER_DIR
  rm -rf "$dir/run" "$dir/log" "$dir/state" "$dir/spool" "$dir/munge" "$dir/tmp" "$dir/jobcomp.log"
  mkdir -p "$dir/run" "$dir/log" "$dir/state" "$dir/spool" "$dir/munge" "$dir/tmp" || return 1
  chmod 755 "$dir/munge" # 0700: munged warns "Socket is inaccessible"

  # ---- munged ------------------------------------------------------------
  local sock=$dir/munge/munge.sock key=$dir/munge/munge.key ok=0
  dd if=/dev/urandom of="$key" bs=1 count=1024 status=none || { _slurm_fail "$dir" "cannot write the munge key $key"; return 1; }
  chmod 400 "$key"
  # --force: munged refuses a socket/key below a group- or world-writable
  # folder without sticky bit (e.g. DIR under a 0777 folder); --force makes
  # that a warning.  --foreground: so that the PID we record is munged's.
  _slurm_spawn "$dir" munged munged --foreground --force \
    --socket="$sock" --key-file="$key" --pid-file="$dir/run/munged.own.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" \
    --num-threads=2
  while (($(_slurm_now) - t0 < timeout)); do
    if timeout 5 munge -n --socket="$sock" 2>/dev/null | timeout 5 unmunge --socket="$sock" >/dev/null 2>&1; then
      ok=1
      break
    fi
    _slurm_alive "$(_slurm_pid_of "$dir" munged)" || break
    sleep 0.1
  done
  ((ok)) || { _slurm_fail "$dir" "munged does not answer on $sock"; return 1; }

  # ---- slurmctld + slurmd; new ports if one was taken meanwhile ----------
  local node ports cport dport try state pid n why
  node=$(hostname -s)
  SLURM_CONF=$dir/slurm.conf
  SLURM_CLUSTER_NODE=$node
  export SLURM_CONF SLURM_CLUSTER_NODE
  for try in 1 2 3; do
    ports=$(_slurm_free_ports 2) || { _slurm_fail "$dir" "found no free TCP ports"; return 1; }
    cport=$(sed -n 1p <<<"$ports")
    dport=$(sed -n 2p <<<"$ports")
    SLURM_CLUSTER_CTLD_PORT=$cport
    SLURM_CLUSTER_SLURMD_PORT=$dport
    export SLURM_CLUSTER_CTLD_PORT SLURM_CLUSTER_SLURMD_PORT
    _slurm_write_conf "$dir" "$node" "$cpus" "$cport" "$dport"
    # -c: cold start (no old state); -i: ignore errors in state files
    _slurm_spawn "$dir" slurmctld slurmctld -D -c -i -f "$dir/slurm.conf"
    _slurm_spawn "$dir" slurmd slurmd -D -N "$node" -f "$dir/slurm.conf"
    why=""
    while :; do
      for n in slurmctld slurmd munged; do
        pid=$(_slurm_pid_of "$dir" $n)
        _slurm_alive "$pid" || { why="$n (pid ${pid:-?}) exited during start"; break 2; }
      done
      state=$(timeout 2 scontrol -o show node "$node" 2>/dev/null | grep -o 'State=[^ ]*' | head -n1 || true)
      [[ "$state" == "State=IDLE" ]] && break
      if (($(_slurm_now) - t0 >= timeout)); then
        _slurm_fail "$dir" "node $node not IDLE after ${timeout}s (last: ${state:-no answer from slurmctld on port $cport})"
        return 1
      fi
      sleep 0.2
    done
    if [[ -z "$why" ]]; then
      _slurm_log "cluster up in $(($(_slurm_now) - t0))s: DIR=$dir node=$node cpus=$cpus ctld_port=$cport slurmd_port=$dport"
      return 0
    fi
    if ((try < 3)) && grep -qs 'Address already in use' "$dir/log/slurmctld.out" "$dir/log/slurmd.out"; then
      _slurm_log "port $cport or $dport was taken meanwhile; retrying with new ports"
      for n in slurmctld slurmd; do
        pid=$(_slurm_pid_of "$dir" $n)
        # (slurmd may sit ~10 s in a registration attempt, deaf to TERM)
        _slurm_is_ours "$pid" "$dir" && _slurm_kill_wait 1 "$pid"
        mv -f "$dir/log/$n.out" "$dir/log/$n.out.try$try" 2>/dev/null || true
      done
      continue
    fi
    _slurm_fail "$dir" "$why"
    return 1
  done
}

# _slurm_kill_wait TIMEOUT PID...: TERM, wait up to TIMEOUT s, then KILL.
_slurm_kill_wait() {
  local to=$1
  shift
  (($#)) || return 0
  local -a pids=("$@") alive=()
  local t0 p
  kill -TERM "${pids[@]}" 2>/dev/null || true
  t0=$(_slurm_now)
  while :; do
    alive=()
    for p in "${pids[@]}"; do
      _slurm_alive "$p" && alive+=("$p")
    done
    ((${#alive[@]})) || return 0
    if (($(_slurm_now) - t0 >= to)); then
      _slurm_log "still alive ${to}s after TERM, sending KILL: ${alive[*]}"
      kill -KILL "${alive[@]}" 2>/dev/null || true
      return 0
    fi
    sleep 0.1
  done
}

# _slurm_kill_jobs DIR: KILL this cluster's slurmstepd's and every process
# under them (batch script, srun, tasks), then orphaned job processes.
_slurm_kill_jobs() {
  local dir=$1
  local -a stepds=() tree=() rest=()
  mapfile -t stepds < <(_slurm_our_stepds "$dir")
  if ((${#stepds[@]})); then
    # freeze them, so that nothing forks while we collect the trees
    kill -STOP "${stepds[@]}" 2>/dev/null || true
    mapfile -t tree < <(_slurm_descendants "${stepds[@]}")
    kill -STOP "${tree[@]}" 2>/dev/null || true
    mapfile -t tree < <(_slurm_descendants "${stepds[@]}")
    kill -KILL "${stepds[@]}" "${tree[@]}" 2>/dev/null || true
  fi
  # job processes whose stepd is gone (mark-less, found by SLURM_CONF)
  mapfile -t rest < <(_slurm_our_pids "$dir")
  local p
  local -a jobs=()
  for p in "${rest[@]}"; do
    _slurm_is_ours "$p" "$dir" || jobs+=("$p")
  done
  ((${#jobs[@]} == 0)) || kill -KILL "${jobs[@]}" 2>/dev/null || true
}

slurm_stop() {
  local dir=${1:-${SLURM_CLUSTER_DIR:-}}
  [[ -n "$dir" ]] || return 0
  # DIR may be gone already (rm -rf before stop): its name is all we need
  if [[ -d "$dir" ]]; then dir=$(cd "$dir" && pwd -P) || return 1; fi
  local to=${SLURM_STOP_TIMEOUT:-10} pid t0
  local -a daemons=() left=() killed=()
  # the daemons: every process that carries our mark (pid files may be gone)
  mapfile -t killed < <(_slurm_our_pids "$dir")
  for pid in "${killed[@]}"; do
    _slurm_is_ours "$pid" "$dir" && daemons+=("$pid")
  done
  # 1. TERM all daemons at once (slurmctld stops scheduling, saves state).
  ((${#daemons[@]} == 0)) || kill -TERM "${daemons[@]}" 2>/dev/null || true
  # 2. KILL the jobs: slurmstepd's and everything under them.
  _slurm_kill_jobs "$dir"
  # 3. wait for the daemons; KILL after the bound.
  _slurm_kill_wait "$to" "${daemons[@]}"
  # 4. a stepd forked meanwhile, anything else of ours: KILL.
  _slurm_kill_jobs "$dir"
  mapfile -t left < <(_slurm_our_pids "$dir")
  if ((${#left[@]})); then
    _slurm_log "slurm_stop: killing leftover processes of $dir: ${left[*]}"
    kill -KILL "${left[@]}" 2>/dev/null || true
  fi
  # 5. bounded wait until all are gone, and reaped by their parent (PID 1
  #    here, which reaps lazily), so that `pgrep` no longer shows zombies.
  t0=$(_slurm_now)
  while :; do
    mapfile -t left < <(_slurm_our_pids "$dir")
    if ((${#left[@]})); then
      if (($(_slurm_now) - t0 >= to)); then
        _slurm_log "slurm_stop: processes of $dir survive SIGKILL: ${left[*]}"
        return 1
      fi
      sleep 0.1
      continue
    fi
    left=()
    for pid in "${daemons[@]}" "${killed[@]}"; do
      _slurm_exists "$pid" && left+=("$pid")
    done
    ((${#left[@]})) || break
    if (($(_slurm_now) - t0 >= to)); then
      _slurm_log "slurm_stop: note: zombies not reaped by their parent yet: ${left[*]}"
      break
    fi
    sleep 0.1
  done
  rm -f "$dir"/run/*.pid
  return 0
}

# slurm_wait_job JOBID SECONDS
slurm_wait_job() {
  if (($# != 2)); then
    _slurm_log "usage: slurm_wait_job JOBID SECONDS"
    return 2
  fi
  local id=$1 to=$2 t0 line state="" ec="" src dir="" comp="" tmo
  # the cluster scontrol talks to: SLURM_CONF; its jobcomp record next to it
  [[ -n "${SLURM_CONF:-}" ]] && dir=$(dirname "$SLURM_CONF") && comp=$dir/jobcomp.log
  t0=$(_slurm_now)
  while :; do
    src=scontrol
    line=""
    # scontrol retries for ~10 s when slurmctld is down: ask only a live one
    if [[ -z "$dir" || ! -d "$dir/run" ]] || _slurm_alive "$(_slurm_pid_of "$dir" slurmctld)"; then
      tmo=$((to - ($(_slurm_now) - t0)))
      ((tmo > 5)) && tmo=5
      ((tmo < 1)) && tmo=1
      line=$(timeout "$tmo" scontrol -o show job "$id" 2>&1 | head -n1 || true)
      if [[ "$line" == *"Invalid job id"* ]]; then
        line=$(grep "^JobId=$id " "$comp" 2>/dev/null | tail -n1 || true)
        if [[ -z "$line" ]]; then
          _slurm_log "slurm_wait_job: slurmctld does not know job $id and $comp has no record of it"
          echo "JobId=$id JobState=UNKNOWN ExitCode=?"
          return 2
        fi
        src=jobcomp
      elif [[ "$line" != JobId=* ]]; then
        line="" # an error message: slurmctld busy or down
      fi
    fi
    if [[ -z "$line" && -n "$comp" && -f "$comp" ]]; then
      # slurmctld has purged it (MinJobAge) or is gone: the jobcomp record
      src=jobcomp
      line=$(grep "^JobId=$id " "$comp" | tail -n1 || true)
    fi
    state=""
    ec=""
    if [[ -n "$line" ]]; then
      state=$(grep -o ' JobState=[^ ]*' <<<" $line" | head -n1 | cut -d= -f2 || true)
      ec=$(grep -o ' ExitCode=[^ ]*' <<<" $line" | head -n1 | cut -d= -f2 || true)
      case "$state" in
      "" | PENDING | RUNNING | CONFIGURING | COMPLETING | SUSPENDED | REQUEUED | REQUEUE_HOLD | REQUEUE_FED | RESIZING | SIGNALING | STAGE_OUT | RESV_DEL_HOLD) ;;
      *)
        echo "JobId=$id JobState=$state ExitCode=${ec:-?}"
        [[ "$state" == COMPLETED && "$ec" == 0:0 ]] && return 0
        return 1
        ;;
      esac
    fi
    if (($(_slurm_now) - t0 >= to)); then
      if [[ -z "$line" ]]; then
        _slurm_log "slurm_wait_job: job $id unknown to this cluster (SLURM_CONF=${SLURM_CONF:-unset}, no jobcomp record)"
      else
        _slurm_log "slurm_wait_job: job $id still ${state:-?} after ${to}s (from $src)"
      fi
      echo "JobId=$id JobState=${state:-UNKNOWN} ExitCode=${ec:-?}"
      return 2
    fi
    sleep 0.5
  done
}

# slurm_step_pids JOBID STEPID [TASKID]
slurm_step_pids() {
  if (($# < 2 || $# > 3)); then
    _slurm_log "usage: slurm_step_pids JOBID STEPID [TASKID]"
    return 2
  fi
  local out
  out=$(timeout 10 scontrol listpids "$1.$2" "${SLURM_CLUSTER_NODE:-$(hostname -s)}" 2>&1) || {
    _slurm_log "slurm_step_pids: scontrol listpids $1.$2 failed: $out"
    return 1
  }
  # columns: PID JOBID STEPID LOCALID GLOBALID
  if (($# == 2)); then
    awk 'NR > 1 { print $1 }' <<<"$out"
    return 0
  fi
  local -a top=()
  mapfile -t top < <(awk -v t="$3" 'NR > 1 && $5 == t { print $1 }' <<<"$out")
  if ((${#top[@]} == 0)); then
    _slurm_log "slurm_step_pids: no task $3 in step $1.$2: $out"
    return 1
  fi
  printf '%s\n' "${top[@]}"
  _slurm_descendants "${top[@]}"
}
