#!/usr/bin/env bash
# bench/raw_dpdk.sh - the raw baseline (bench/raw) over the dpdk transport
# between two network namespaces joined by a veth pair (scripts/netns):
# the server in namespace b pinned to CPU 1, the client in namespace a
# pinned to CPU 0. Then, for reference, the same over kernel UDP across the
# same veth pair. CSV rows on stdout, as bench/raw prints them.
#
#   bench/raw_dpdk.sh [BUILD_DIR] [raw client options, e.g. --size 32 --iters 100000]
#
# PMD=af_packet (default) or PMD=af_xdp picks the DPDK driver on the veth.
# NETNS_PREFIX (default rawb) names the testbed, which is torn down on exit.
# Needs root and the dpdk transport in BUILD_DIR (default: build).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
[ $# -gt 0 ] && shift
raw=$build/bench/raw
pmd=${PMD:-af_packet}
prefix=${NETNS_PREFIX:-rawb}
[ -x "$raw" ] || { echo "raw_dpdk: $raw not built" >&2; exit 1; }

server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  "$top/scripts/netns" down "$prefix" >&2
}
trap cleanup EXIT
"$top/scripts/netns" up "$prefix" >&2
eval "$("$top/scripts/netns" env "$prefix")"

case $pmd in
  af_packet)
    va="net_af_packet0,iface=$IF_A,qdisc_bypass=1" vb="net_af_packet0,iface=$IF_B,qdisc_bypass=1"
    setup=true ;;
  af_xdp)
    va="net_af_xdp0,iface=$IF_A" vb="net_af_xdp0,iface=$IF_B"
    setup="mount -t bpf bpf /sys/fs/bpf" ;; # private to the `ip netns exec` mount namespace
  *) echo "raw_dpdk: PMD must be af_packet or af_xdp" >&2; exit 2 ;;
esac

# run SERVER_URI CLIENT_URI PEER_URI [raw options]: one server, one client.
run() {
  local server=$1 client=$2 peer=$3
  shift 3
  ip netns exec "$NS_B" taskset -c 1 timeout 300 sh -c "$setup && exec \"\$@\"" sh \
    "$raw" --role server --server "$server" >&2 &
  server_pid=$!
  ip netns exec "$NS_A" timeout 300 sh -c "$setup && exec \"\$@\"" sh \
    "$raw" --role client --cpu 0 --uri "$client" --server "$peer" "$@"
  for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}

echo "raw over dpdk ($pmd on veth $IF_A <-> $IF_B):" >&2
run "dpdk://$DPDK_IP_B:31850?vdev=$vb" "dpdk://$DPDK_IP_A:0?vdev=$va" \
  "dpdk://$DPDK_IP_B:31850?mac=$MAC_B" "$@"
echo "raw over kernel udp across the same veth pair:" >&2
setup=true
run "udp://$IP_B:31850" "udp://$IP_A:0" "udp://$IP_B:31850" "$@" | tail -n 1
