#!/usr/bin/env bash
# bench/rma_perf_dpdk.sh - bench/rma_perf over the dpdk transport (net_af_packet
# on a veth pair between two network namespaces made by scripts/netns): one
# `rma_perf --role server` (the RPC echo, the key service that hands out keys
# and a 64 MiB region served one-sided) in namespace b on CPU 1, and
# `rma_perf --role client` in namespace a on CPU 0, which measures a
# one-sided READ (or WRITE, --op write) beside an RPC of the same size, in
# alternating order within each round, every endpoint busy-polling.
#
#   bench/rma_perf_dpdk.sh [BUILD_DIR] [rma_perf options]
#
#   bench/rma_perf_dpdk.sh build --rounds 3 --iters 5000 --seconds 1
#       --mode lat (32 B, round-trip median and p99), then --mode rate
#       (60 ops in flight, Mops); every other option goes to both
#   bench/rma_perf_dpdk.sh build --mode lat --sizes 32,4K --rounds 5
#       only the mode given
#
# BUILD_DIR defaults to build/; rma_perf's CSV goes to stdout, the testbed's
# notes to stderr. NETNS_PREFIX (default rmab) names the testbed, torn down on
# exit. Needs root (namespaces, hugepages, raw sockets). `rma_perf --help`
# lists the options (--role, --uri, --server and --cpu are set here).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
[ $# -gt 0 ] && shift
perf=$build/bench/rma_perf
prefix=${NETNS_PREFIX:-rmab}
[ -x "$perf" ] || { echo "rma_perf_dpdk: $perf not built" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "rma_perf_dpdk: needs root" >&2; exit 1; }

modes=(lat rate)
for a in "$@"; do
  case $a in --mode | --mode=*) modes=("") ;; esac # the caller's --mode only
done

log=$(mktemp)
spid=
cleanup() {
  set +e
  if [ -n "$spid" ]; then
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
  fi
  "$top/scripts/netns" down "$prefix" >&2
  rm -f "$log"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
"$top/scripts/netns" up "$prefix" >&2
eval "$("$top/scripts/netns" env "$prefix")"
va="net_af_packet0,iface=$IF_A,qdisc_bypass=1" vb="net_af_packet0,iface=$IF_B,qdisc_bypass=1"
server="dpdk://$DPDK_IP_B:31850"

# The server serves until killed (or until this script is gone).
ip netns exec "$NS_B" "$perf" --role server --cpu 1 --server "$server?vdev=$vb" >"$log" 2>&1 &
spid=$!
for _ in $(seq 100); do # its note comes once its endpoint (and the EAL) started
  grep -q 'rma_perf server on' "$log" && break
  kill -0 "$spid" 2>/dev/null || { cat "$log" >&2; echo "rma_perf_dpdk: the server died" >&2; exit 1; }
  sleep 0.1
done
sleep 2 # EAL and port start-up; the client also retries a failed measurement
kill -0 "$spid" 2>/dev/null || { cat "$log" >&2; echo "rma_perf_dpdk: the server died" >&2; exit 1; }
sed 's/^/server: /' "$log" >&2

rc=0
for m in "${modes[@]}"; do
  ip netns exec "$NS_A" timeout 600 "$perf" --cpu 0 ${m:+--mode "$m"} "$@" --role client \
    --uri "dpdk://$DPDK_IP_A:31870?vdev=$va" --server "$server?mac=$MAC_B" || rc=1
done
if [ $rc -ne 0 ]; then
  echo "rma_perf_dpdk: a measurement failed; the server said:" >&2
  sed 's/^/server: /' "$log" >&2
fi
exit $rc
