#!/usr/bin/env bash
# TLS 1.3 through the door: `atoll certs` makes a cluster's CA; a syncer and
# two learners with its certificates train together to the end of the run.
# Refused during the handshake, before any atoll message: a learner without
# TLS, a learner whose certificate another CA signed, a learner that expects
# another name on the syncer's certificate, and the syncer's own certificate
# used as a learner's. `atoll run --processes --tls-dir` runs a whole cluster
# over TLS.  Usage: tls_test.sh ATOLL SCRATCH
source "$(dirname "$0")/lib.sh" "$1" "$2"

"$atoll" certs "$work/pki" >"$work/certs.log" 2>&1 || die "atoll certs failed"
"$atoll" certs "$work/other" >/dev/null 2>&1 || die "atoll certs (another CA) failed"
[[ $(stat -c %a "$work/pki/learner.key") == 600 ]] || die "a key is readable by others"
syncer_tls=(--tls-cert "$work/pki/syncer.pem" --tls-key "$work/pki/syncer.key" --tls-ca "$work/pki/ca.pem")
learner_tls=(--tls-cert "$work/pki/learner.pem" --tls-key "$work/pki/learner.key" --tls-ca "$work/pki/ca.pem")

write_topology "$work/topo.toml" 1000000000  # ended by the test
start_syncer syncer "$work/topo.toml" --listen 127.0.0.1:0 "${syncer_tls[@]}" --report "$work/syncer.json"
grep -q "(TLS 1.3, learner certificates required)" "$work/syncer.log" || die "the syncer does not say it serves over TLS"
start_learner l0 0 "${learner_tls[@]}"
start_learner l1 1 "${learner_tls[@]}" --tls-name localhost
wait_for syncer "learner 0 registered" 60
wait_for syncer "learner 1 registered" 60

# Each of these gives up after 3 s and exits 77, refused during the handshake:
# a configuration that starting it again cannot mend.
refused() {  # NAME ARGS...
  local name=$1 status=0
  shift
  "$atoll" learner --join "127.0.0.1:$port" --id 0 --give-up 3 "$@" >"$work/$name.log" 2>&1 || status=$?
  ((status == 77)) || die "$name: exited with $status, not 77"
}
refused plain
grep -q "before its challenge: does it require TLS" "$work/plain.log" || die "a learner without TLS is not told why"
refused stranger --tls-cert "$work/other/learner.pem" --tls-key "$work/other/learner.key" --tls-ca "$work/other/ca.pem"
grep -q "certificate verify failed" "$work/stranger.log" || die "another CA's learner is not told why"
refused misnamed "${learner_tls[@]}" --tls-name syncer.elsewhere.example
refused impostor --tls-cert "$work/pki/syncer.pem" --tls-key "$work/pki/syncer.key" --tls-ca "$work/pki/ca.pem"
grep -q "unsupported certificate" "$work/impostor.log" ||
  die "the syncer's own certificate (for servers only) was not refused as a learner's"
grep -q "TLS handshake with 127.0.0.1:[0-9]* failed" "$work/syncer.log" || die "the syncer does not log failed handshakes"
grep -q "learner 0 registered" "$work/plain.log" "$work/stranger.log" "$work/misnamed.log" "$work/impostor.log" &&
  die "a refused learner registered"

stop_run "$syncer_pid"
expect_exit "$syncer_pid" 120 0 "the syncer"
expect_exit "$l0_pid" 30 0 "learner 0"
expect_exit "$l1_pid" 30 0 "learner 1"
grep -q "lost the syncer" "$work/l0.log" "$work/l1.log" && die "a TLS connection dropped during the run"
merged=$(learner_json "$work/syncer.json" 1 | json_number - merged)
((merged > 0)) || die "learner 1 was never merged over TLS"

# A whole cluster as local processes over TLS.
status=0
"$atoll" run "$work/topo.toml" --set tokens=40000 --processes --tls-dir "$work/run-pki" --report "$work/run.json" \
  >"$work/run.log" 2>&1 || status=$?
((status == 0)) || die "atoll run --processes --tls-dir exited with $status"
[[ -s "$work/run-pki/ca.pem" ]] || die "--tls-dir made no certificates"
echo "tls_test: ok (two learners over TLS 1.3, $merged merges of learner 1; plain, another CA, another name and the syncer's certificate refused; --processes --tls-dir)"
