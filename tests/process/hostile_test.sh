#!/usr/bin/env bash
# Hostile traffic on the syncer's port while a learner trains: random bytes,
# bytes that imitate the start of CAF's handshake, a frame that announces
# 4 GiB, and 200 idle connections that never say hello (closed once the
# syncer's --handshake-timeout, 1 s here, passes: the test waits until they
# are). The syncer refuses all of it without buffering it (its peak RSS grows
# by less than 64 MiB), the learner keeps its connection and is merged
# throughout and after, and the syncer, stopped then, ends its run with exit
# 0. Over TLS with ATOLL_TEST_TLS=1.
# Usage: hostile_test.sh ATOLL SCRATCH
source "$(dirname "$0")/lib.sh" "$1" "$2"

write_topology "$work/topo.toml" 1000000000  # ended by the test
metrics=$(free_port)
start_syncer syncer "$work/topo.toml" --listen 127.0.0.1:0 --report "$work/syncer.json" \
  --handshake-timeout 1 --metrics "127.0.0.1:$metrics"
start_learner l0 0 --report "$work/l0.json"
wait_for syncer "learner 0 registered" 60
wait_status "$metrics" 'per_learner[0]["merged"] >= 5' 120  # training under way: the baseline is a working syncer's
rss_before=$(peak_rss_kb "$syncer_pid")

# Random bytes, of every length up to 64 KiB, one connection each.
for i in $(seq 40); do
  head -c $((i * 1637)) /dev/urandom >/dev/tcp/127.0.0.1/"$port" 2>/dev/null || true
done
# The first 32 bytes of a CAF BASP handshake header (they crashed CAF's middleman).
for _ in $(seq 32); do
  printf '\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x01' \
    >/dev/tcp/127.0.0.1/"$port" 2>/dev/null || true
done
# Frames that announce 4 GiB and 256 MiB, each followed by a little body.
for len in '\xff\xff\xff\xff' '\x00\x00\x00\x10'; do
  for _ in $(seq 20); do
    { printf "$len"; head -c 100000 /dev/urandom; } >/dev/tcp/127.0.0.1/"$port" 2>/dev/null || true
  done
done
# 200 idle connections, held open until the syncer closes them: the 16 the per-address cap
# lets wait for a handshake are closed at its deadline (--handshake-timeout 1), the rest at once.
idle=()
for _ in $(seq 200); do
  exec {fd}<>/dev/tcp/127.0.0.1/"$port" || true
  idle+=("$fd")
done
kill -0 "$syncer_pid" 2>/dev/null || die "the syncer died under hostile traffic"
open_fds=("${idle[@]}")
idle_since=$SECONDS
while ((${#open_fds[@]} > 0 && SECONDS - idle_since < 60)); do
  still=()
  for fd in "${open_fds[@]}"; do
    # Open until the read meets its end (status 1-128); a timeout (over 128) means it is held open still.
    rc=0
    read -r -N 65536 -t 0.01 -u "$fd" _ 2>/dev/null || rc=$?
    if ((rc == 0 || rc > 128)); then still+=("$fd"); fi
  done
  open_fds=("${still[@]}")
  kill -0 "$syncer_pid" 2>/dev/null || die "the syncer died under hostile traffic"
  sleep 0.1
done
((${#open_fds[@]} == 0)) || die "${#open_fds[@]} idle connections still open 60 s past a 1-s handshake deadline"
echo "the syncer closed all ${#idle[@]} idle connections within $((SECONDS - idle_since)) s"
for fd in "${idle[@]}"; do exec {fd}>&-; done
rss_after=$(peak_rss_kb "$syncer_pid")
grew=$(((rss_after - rss_before) / 1024))
echo "syncer peak RSS: ${rss_before} KiB before, ${rss_after} KiB after the hostile traffic (+${grew} MiB)"
((grew < 64)) || die "the syncer's peak RSS grew by $grew MiB under hostile traffic (limit 64)"
grep -q "refused a connection from 127.0.0.1" "$work/syncer.log" || die "no connection was refused for the per-address cap"
# The learner trains on: merged again after the hostile traffic, then the run is ended.
merged=$(status_value "$metrics" 'per_learner[0]["merged"]')
wait_status "$metrics" "per_learner[0][\"merged\"] >= $merged + 5" 120
stop_run "$syncer_pid"

expect_exit "$syncer_pid" 120 0 "the syncer"
expect_exit "$l0_pid" 30 0 "learner 0"
grep -q "lost the syncer" "$work/l0.log" && die "the learner lost its connection during the hostile traffic"
tokens=$(learner_json "$work/syncer.json" 0 | json_number - tokens)
merged=$(learner_json "$work/syncer.json" 0 | json_number - merged)
((merged > 0)) || die "the learner was never merged"
echo "hostile_test: ok (peak RSS +${grew} MiB; the learner trained $tokens tokens, $merged merges, without losing its connection)"
