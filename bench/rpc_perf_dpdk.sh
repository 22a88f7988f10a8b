#!/usr/bin/env bash
# bench/rpc_perf_dpdk.sh - bench/rpc_perf over the dpdk transport (net_af_packet
# on a veth pair between two network namespaces made by scripts/netns): the
# client in namespace a on CPU 0; each raw or erma server spawned in
# namespace b on CPU 1, alternating rounds as rpc_perf always does.
#
#   bench/rpc_perf_dpdk.sh [BUILD_DIR] [rpc_perf options, e.g. --mode lat --rounds 5]
#
# NETNS_PREFIX (default rpcb) names the testbed, torn down on exit. Needs root.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
[ $# -gt 0 ] && shift
perf=$build/bench/rpc_perf
prefix=${NETNS_PREFIX:-rpcb}
[ -x "$perf" ] || { echo "rpc_perf_dpdk: $perf not built" >&2; exit 1; }
trap '"$top/scripts/netns" down "$prefix" >&2' EXIT
"$top/scripts/netns" up "$prefix" >&2
eval "$("$top/scripts/netns" env "$prefix")"
va="net_af_packet0,iface=$IF_A,qdisc_bypass=1" vb="net_af_packet0,iface=$IF_B,qdisc_bypass=1"
ip netns exec "$NS_A" timeout 600 "$perf" --cpu 0 "$@" \
  --uri "dpdk://$DPDK_IP_A:31870?vdev=$va" \
  --server "dpdk://$DPDK_IP_B:31850?mac=$MAC_B" --raw-server "dpdk://$DPDK_IP_B:31860?mac=$MAC_B" \
  --listen-server "dpdk://$DPDK_IP_B:31850?vdev=$vb" --listen-raw "dpdk://$DPDK_IP_B:31860?vdev=$vb" \
  --spawn "ip netns exec $NS_B taskset -c 1"
