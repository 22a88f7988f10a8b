#!/bin/bash
# record_raftkv_history.sh - records the history tests/raftkv/data/raftkv_history.txt
# was made from: three raftkv_server replicas on udp loopback, CLIENTS
# raftkv_client load --history runs side by side on KEYS keys (few keys: long
# histories per key), while every second or so the leader is killed
# (SIGKILL, started again on its directory 0.5 s later) or paused
# (SIGSTOP, SIGCONT after 100-500 ms). Ops time out after 150 ms, so the
# kills and pauses leave writes of unknown outcome. The clients' files, put
# together, are written to OUT, the kills and pauses listed in its header.
# Each client's own read-back check fails as a rule (the others overwrite
# its keys); the history is what counts.
#   record_raftkv_history.sh SERVER CLIENT PORT_BASE OUT [SECONDS] [CLIENTS] [KEYS]
set -u
server=$1 client=$2 base=$3 out=$4 seconds=${5:-10} clients=${6:-4} keys=${7:-2}
. "$(dirname "$0")/../raftkv_cluster.sh"
leader() { timeout 5 "$client" --servers "$peers" leader 2>/dev/null; }

: >"$dir/events"
for i in 1 2 3; do start "$i"; done
leader >/dev/null || { echo "no leader elected"; exit 1; }
loads=()
for c in $(seq 1 "$clients"); do
  "$client" --servers "$peers" --op-timeout-ms 150 load --seconds "$seconds" --keys "$keys" \
    --inflight 4 --history "$dir/h$c.txt" >"$dir/load$c.log" 2>&1 &
  loads+=($!)
done
end=$((SECONDS + seconds))
while [ $SECONDS -lt "$end" ]; do
  sleep 0.$((RANDOM % 5 + 5))
  l=$(leader) || continue
  if [ $((RANDOM % 2)) -eq 0 ]; then
    echo "kill replica $l" | tee -a "$dir/events"
    kill -9 "${pids[$l]}"
    wait "${pids[$l]}" 2>/dev/null
    sleep 0.5
    start "$l"
  else
    ms=$((RANDOM % 401 + 100))
    echo "pause replica $l for $ms ms" | tee -a "$dir/events"
    kill -STOP "${pids[$l]}"
    sleep "$(printf '0.%03d' "$ms")"
    kill -CONT "${pids[$l]}"
  fi
done
for p in "${loads[@]}"; do wait "$p"; done
grep -h 'history:' "$dir"/load*.log
{
  echo "# raftkv_client load --history of $clients clients, $keys keys, $seconds s, leader" \
    "killed or paused about every second (tests/raftkv/data/record_raftkv_history.sh):"
  echo "# $(tr '\n' ';' <"$dir/events")"
  echo "# KIND KEY VALUE INVOKE_NS COMPLETE_NS OUTCOME (COMPLETE_NS - : unknown outcome)"
  cat "$dir"/h*.txt | grep -v '^#'
} >"$out"
echo "$(grep -vc '^#' "$out") ops, $(grep -c ' unknown$' "$out") of unknown outcome, in $out"
