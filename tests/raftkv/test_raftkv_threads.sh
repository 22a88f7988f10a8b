#!/bin/bash
# test_raftkv_threads - three raftkv_server processes on udp loopback, each
# running GROUPS raft groups on threads of their own (--threads); a client
# of all the groups (--groups) writes for SECONDS while the replica that
# leads group 0, with a copy of every group, is killed (SIGKILL) a quarter
# of the way in.
# Passes when every key holds its last acknowledged write and writes are
# acknowledged in the run's last quarter (raftkv_client load checks both),
# and a client of one group alone is refused another group's key.
#   test_raftkv_threads.sh SERVER CLIENT PORT_BASE [GROUPS] [SECONDS]
set -u
server=$1 client=$2 base=$3 groups=${4:-3} seconds=${5:-6}
. "$(dirname "$0")/raftkv_cluster.sh"

for i in 1 2 3; do start $i; done
cli leader >/dev/null || fail "no leader elected in group 0"
cli load --seconds "$seconds" --keys 500 --inflight 16 >"$dir/load.log" 2>&1 &
load=$!
sleep $((seconds / 4))
leader=$(cli leader) || fail "no leader of group 0 before the kill"
kill -9 "${pids[$leader]}"
echo "killed replica $leader (group 0's leader, $groups groups) a quarter into the load"
wait $load
rc=$?
cat "$dir/load.log"
[ $rc -eq 0 ] || fail "the load failed (exit $rc)"
# group 1's replicas alone (the killed one among them), as a cluster of one
# group: its keys only
one=udp://127.0.0.1:$((base + step + 1)),udp://127.0.0.1:$((base + 2 * step + 1))
one=$one,udp://127.0.0.1:$((base + 3 * step + 1))
refused=0
for k in a b c d e f g h; do
  out=$(timeout 60 "$client" --servers "$one" put "key-$k" v 2>&1)
  case $out in ok) ;; *"another number of raft groups"*) refused=$((refused + 1)) ;;
    *) fail "put key-$k to group 1 alone: $out" ;; esac
done
[ $refused -gt 0 ] && [ $refused -lt 8 ] || fail "$refused of 8 keys refused by group 1 alone"
echo "group 1 alone took its keys and refused $refused of 8 others'"
echo PASS
