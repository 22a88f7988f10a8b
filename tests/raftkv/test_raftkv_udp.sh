#!/bin/bash
# test_raftkv_udp - three raftkv_server processes on udp loopback; a client
# writes for SECONDS while the leader is killed (SIGKILL) a quarter of the
# way in. Passes when a new leader is elected, the client carries on (writes
# acknowledged in the run's last quarter) and every key holds its last
# acknowledged write (raftkv_client load checks both), and the killed
# replica, started again on its directory, catches up.
#   test_raftkv_udp.sh SERVER CLIENT PORT_BASE [SECONDS]
set -u
server=$1 client=$2 base=$3 seconds=${4:-8}
. "$(dirname "$0")/raftkv_cluster.sh"

for i in 1 2 3; do start $i; done
leader=$(cli leader) || fail "no leader elected (raftkv_client leader: $leader)"
echo "replica $leader leads"
cli load --seconds "$seconds" --keys 500 >"$dir/load.log" 2>&1 &
load=$!
sleep $((seconds / 4))
leader=$(cli leader) || fail "no leader before the kill"
kill -9 "${pids[$leader]}"
echo "killed replica $leader (pid ${pids[$leader]}) a quarter into the load"
killed=$leader
wait $load
rc=$?
cat "$dir/load.log"
[ $rc -eq 0 ] || fail "the load failed (exit $rc)"
now=$(cli leader) || fail "no leader after the kill"
[ "$now" != "$killed" ] || fail "replica $killed, killed, still named leader"
echo "replica $now leads after the kill"
# The killed replica comes back on its directory and catches up: its own
# copy (a stale read sent to it alone) comes to hold a write made after it
# died, within 30 s.
start "$killed"
cli put after-restart yes >/dev/null || fail "put after the restart"
[ "$(cli get after-restart)" = yes ] || fail "get after the restart"
own=udp://127.0.0.1:$((base + killed))
for i in $(seq 1 300); do
  got=$(timeout 20 "$client" --servers "$own" --stale get after-restart 2>/dev/null)
  [ "$got" = yes ] && break
  sleep 0.1
done
[ "$got" = yes ] || fail "replica $killed, started again, did not catch up in 30 s (has '$got')"
echo "replica $killed started again on its directory and caught up"
echo PASS
