#!/usr/bin/env bash
# TLS through CAF's openssl module: a syncer and a learner with certificates
# from one test CA train together; a learner without TLS cannot join the TLS
# port.  Needs the openssl command (skipped, exit 77, without it).
# Not in CTest: with CAF 0.17.6 the TLS connections drop every few hundred
# milliseconds (learners reconnect), and the run's final Done can be lost, so
# this passes about 2 times in 3. Kept to measure a fix.
# Usage: tls_test.sh ATOLL SCRATCH
command -v openssl >/dev/null || { echo "tls_test: skipped: no openssl command"; exit 77; }
source "$(dirname "$0")/lib.sh" "$1" "$2"

pki="$work/pki"
mkdir -p "$pki"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.pem" -days 2 \
  -subj /CN=atoll-test-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$pki/node.key" -out "$pki/node.csr" -subj /CN=127.0.0.1 2>/dev/null
openssl x509 -req -in "$pki/node.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial \
  -out "$pki/node.pem" -days 2 2>/dev/null
tls=(--tls-cert "$pki/node.pem" --tls-key "$pki/node.key" --tls-ca "$pki/ca.pem")

write_topology "$work/topo.toml" 1000000000  # ended by the test
start_syncer syncer "$work/topo.toml" --listen 127.0.0.1:0 "${tls[@]}" --report "$work/syncer.json"
grep -q "(TLS)" "$work/syncer.log" || die "the syncer does not say it serves over TLS"
start_learner l0 0 "${tls[@]}"
wait_for syncer "learner 0 registered" 60
start_learner l1 1 "${tls[@]}"
wait_for syncer "learner 1 registered" 60

# Plain TCP to the TLS port: no handshake, so no topology; it gives up.
status=0
"$atoll" learner --join "127.0.0.1:$port" --id 0 --give-up 3 >"$work/plain.log" 2>&1 || status=$?
((status == 1)) || die "a learner without TLS exited with $status, not 1"

stop_run "$syncer_pid"
expect_exit "$syncer_pid" 120 0 "the syncer"
expect_exit "$l0_pid" 30 0 "learner 0"
expect_exit "$l1_pid" 30 0 "learner 1"
merged=$(learner_json "$work/syncer.json" 1 | json_number - merged)
((merged > 0)) || die "learner 1 was never merged over TLS"
echo "tls_test: ok (two learners trained over TLS, $merged merges of learner 1; plain TCP refused)"
