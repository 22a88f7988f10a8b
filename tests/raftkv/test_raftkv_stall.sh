#!/bin/bash
# test_raftkv_stall - three raftkv_server processes on udp loopback; a client
# writes for 2 x PAUSES + 2 seconds while the leader is stopped (SIGSTOP)
# for 300 ms, then continued (SIGCONT), every 2 s, PAUSES times: shorter
# than an election timeout (500 ms), so no new leader is needed. Passes when
# the load passes (every key holds its last acknowledged write, writes
# acknowledged in the run's last quarter), a leader is there after, and no
# time without an acknowledgement reached 3 s (10x a pause: a real
# transport on a busy machine). The gaps are printed (about 350-420 ms a
# pause; the client before issue 27 sat out 1.2 s after each); the bound of
# the stall plus 300 ms is test_raftkv's test_leader_stalled, on the sim.
#   test_raftkv_stall.sh SERVER CLIENT PORT_BASE [PAUSES]
set -u
server=$1 client=$2 base=$3 pauses=${4:-3}
seconds=$((2 * pauses + 2))
. "$(dirname "$0")/raftkv_cluster.sh"

for i in 1 2 3; do start $i; done
leader=$(cli leader) || fail "no leader elected (raftkv_client leader: $leader)"
echo "replica $leader leads"
t0=$(date +%s%N)
cli load --seconds "$seconds" --keys 500 >"$dir/load.log" 2>&1 &
load=$!
for k in $(seq 1 "$pauses"); do
  sleep 1.5
  leader=$(cli leader) || fail "no leader before pause $k"
  at=$(( ($(date +%s%N) - t0) / 1000000 ))
  kill -STOP "${pids[$leader]}"
  sleep 0.3
  kill -CONT "${pids[$leader]}"
  echo "pause $k: replica $leader stopped for 300 ms about $at ms into the load"
  sleep 0.2
done
wait $load
rc=$?
cat "$dir/load.log"
[ $rc -eq 0 ] || fail "the load failed (exit $rc)"
longest=$(grep -oE "longest time without an acknowledgement [0-9]+" "$dir/load.log" |
  grep -oE "[0-9]+$") || fail "the load did not report its longest gap"
echo "the longest time without an acknowledgement: $longest ms"
[ "$longest" -lt 3000 ] || fail "$longest ms without an acknowledgement (10x a 300 ms pause)"
now=$(cli leader) || fail "no leader after the stalls"
echo "replica $now leads after the stalls"
echo PASS
