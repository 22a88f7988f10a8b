# tests/raftkv/raftkv_cluster.sh - sourced by the raftkv scripts that run on udp
# loopback: three raftkv_server replicas, each with its directory in a
# temporary folder. Set server, client, base (the replicas listen on
# base + 1 .. base + 3) and seconds (how long a replica lives, /10) first;
# groups G (optional) runs G raft groups per replica (--threads, the
# replicas then at base + 8, + 16, + 24 and the ports after each).
#   start ID       starts replica ID (1..3) on its directory; its pid is pids[ID]
#   cli ARGS...    raftkv_client --servers (the three) ARGS, 60 s at most
#   fail MESSAGE   prints it and the last lines of every log, exits 1
# At exit every replica is continued and killed, and the folder goes.
dir=$(mktemp -d /tmp/raftkv_cluster.XXXXXX)
groups=${groups:-1}
step=$((groups > 1 ? 8 : 1))
peers=udp://127.0.0.1:$((base + step)),udp://127.0.0.1:$((base + 2 * step))
peers=$peers,udp://127.0.0.1:$((base + 3 * step))
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "== $f"; tail -5 "$f"; done; exit 1; }
start() {
  local threads=()
  [ "$groups" -gt 1 ] && threads=(--threads "$groups")
  "$server" --id "$1" --peers "$peers" --dir "$dir/r$1" --seconds $((seconds * 10)) \
    "${threads[@]}" >>"$dir/server$1.log" 2>&1 &
  pids[$1]=$!
}
cli() { timeout 60 "$client" --servers "$peers" --groups "$groups" "$@"; }
