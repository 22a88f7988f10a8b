#!/bin/bash
# test_raftkv_stall - three raftkv_server processes on udp loopback; a client
# writes for 2 x PAUSES + 2 seconds while the leader is stopped (SIGSTOP)
# for 300 ms, then continued (SIGCONT), every 2 s, PAUSES times: shorter
# than an election timeout (500 ms), so no new leader is needed. Passes when the load passes (every key
# holds its last acknowledged write, writes acknowledged in the run's last
# quarter) and the client did not sit out down_ns (1 s) after the stalls:
# at most one of them left it 1 s or more without an acknowledgement (the
# old client took 1.2 s after every one: 200 ms to time the leader out,
# then down_ns passing it over). The times themselves are printed, not
# asserted (a real transport on a busy machine).
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
gaps=$(grep -o "such times of 100 ms or more.*" "$dir/load.log") ||
  fail "the load did not report its gaps"
long=$(echo "$gaps" | grep -oE "[0-9]+\.[0-9] ms at" | awk '$1 >= 1000' | wc -l)
echo "$long of $pauses stalls left the client 1 s or more without an acknowledgement"
[ "$long" -le 1 ] || fail "$long stalls of 300 ms cost the client 1 s or more each"
now=$(cli leader) || fail "no leader after the stalls"
echo "replica $now leads after the stalls"
echo PASS
