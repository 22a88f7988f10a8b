#!/usr/bin/env bash
# test_dpdk.sh PEER NETNS RPC_PEER RMA_PEER - the dpdk transport between two
# network namespaces joined by a veth pair (made by scripts/netns, removed on
# exit): dpdk_peer echo in one namespace, dpdk_peer client (two endpoints in
# one process) in the other, over net_af_packet, then over net_af_xdp where it
# loads; over each, erma RPCs (rpc_peer server and client) and one-sided ops
# and a 3-server KVCS run (rma_peer server and client: every endpoint of a
# side in one process, as af_xdp needs).
# Exit 0 pass, 1 fail, 77 skip (with the reason printed).
set -uo pipefail
peer=$1 netns=$2 rpc_peer=$3 rma_peer=${4:-}

skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, hugepages, raw sockets)"
command -v ip >/dev/null || skip "iproute2 (ip) not installed"
[ -x "$peer" ] || skip "dpdk_peer not built"
[ -x "$rpc_peer" ] || skip "rpc_peer not built"
[ -x "$rma_peer" ] || skip "rma_peer not built (pass it as the 4th argument)"

prefix=ed$$
prefix=${prefix:0:10}
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  "$netns" down "$prefix" >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 1' INT TERM

"$netns" up "$prefix" || skip "cannot create the namespaces and veth pair (scripts/netns up failed)"
eval "$("$netns" env "$prefix")"
free=$(awk '$1 == "HugePages_Free:" {print $2}' /proc/meminfo)
[ "${free:-0}" -ge 128 ] || skip "fewer than 128 free 2 MiB hugepages (have ${free:-0})"

# run_pair NAME VDEV_A VDEV_B [NS_SETUP]: one exchange; returns the client's status.
run_pair() {
  local name=$1 va=$2 vb=$3 setup=${4:-true}
  echo "== $name"
  timeout 20 ip netns exec "$NS_B" sh -c "$setup && exec \"\$0\" echo \"\$1\" \"\$2\"" "$peer" \
    "dpdk://$DPDK_IP_B:7000?vdev=$vb" "$DPDK_IP_A" > "$dir/echo.log" 2>&1 &
  local echo_pid=$!
  pids+=("$echo_pid")
  ERMA_DPDK_NEIGH="$DPDK_IP_B=$MAC_B" timeout 20 ip netns exec "$NS_A" \
    sh -c "$setup && exec \"\$0\" client \"\$1\" \"\$2\" \"\$3\"" "$peer" \
    "dpdk://$DPDK_IP_A:7001?vdev=$va" "dpdk://$DPDK_IP_A:7002" \
    "dpdk://$DPDK_IP_B:7000?mac=$MAC_B" 2>&1 | sed 's/^/client: /'
  local crc=${PIPESTATUS[0]}
  # The echo side exits on the client's stop packets; give it 5 s at most.
  [ "$crc" -eq 0 ] || kill "$echo_pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$echo_pid" 2>/dev/null || break; sleep 0.1; done
  kill "$echo_pid" 2>/dev/null
  wait "$echo_pid"
  local erc=$?
  sed 's/^/echo:   /' "$dir/echo.log"
  if [ "$crc" -eq 77 ]; then return 77; fi
  if [ "$crc" -ne 0 ] || [ "$erc" -ne 0 ]; then
    echo "$name: FAIL (client $crc, echo $erc)"
    return 1
  fi
  echo "$name: ok"
}

dir=$(mktemp -d)
trap 'cleanup; rm -rf "$dir"' EXIT
# Under ASan: libxdp (Debian 1.3) never frees the umem struct that
# xsk_umem__create allocates, even when the af_xdp port is closed.
echo "leak:xsk_umem__create" > "$dir/lsan.supp"
export LSAN_OPTIONS="suppressions=$dir/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
status=0
run_pair af_packet "net_af_packet0,iface=$IF_A,qdisc_bypass=1" \
  "net_af_packet0,iface=$IF_B,qdisc_bypass=1"
rc=$?
[ $rc -eq 77 ] && skip "DPDK cannot open net_af_packet here (see the log above)"
[ $rc -ne 0 ] && status=1

# run_rpc NAME VDEV_A VDEV_B [NS_SETUP]: erma RPCs over dpdk, rpc_peer server in
# one namespace, client in the other.
run_rpc() {
  local name=$1 va=$2 vb=$3 setup=${4:-true}
  echo "== rpc over dpdk $name"
  timeout 200 ip netns exec "$NS_B" sh -c "$setup && exec \"\$0\" server \"\$1\"" "$rpc_peer" \
    "dpdk://$DPDK_IP_B:7100?vdev=$vb" > "$dir/rpc_server.log" 2>&1 &
  local spid=$!
  pids+=("$spid")
  timeout 200 ip netns exec "$NS_A" sh -c "$setup && exec \"\$0\" client \"\$1\" \"\$2\"" \
    "$rpc_peer" "dpdk://$DPDK_IP_A:7200?vdev=$va" "dpdk://$DPDK_IP_B:7100?mac=$MAC_B" 2>&1 |
    grep -vE '^lib(bpf|xdp):' | sed 's/^/rpc client: /'
  local crc=${PIPESTATUS[0]}
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  grep -vE 'notice|^lib(bpf|xdp):' "$dir/rpc_server.log" | sed 's/^/rpc server: /'
  [ "$crc" -eq 0 ] && echo "rpc $name: ok" || echo "rpc $name: FAIL ($crc)"
  return "$crc"
}
run_rpc af_packet "net_af_packet0,iface=$IF_A,qdisc_bypass=1" \
  "net_af_packet0,iface=$IF_B,qdisc_bypass=1" || status=1

# run_rma NAME VDEV_A VDEV_B [NS_SETUP]: one-sided ops and a 3-server KVCS run
# over dpdk: rma_peer server (a region and kvcs servers on ports 7301-7303) in
# one namespace, client (kvcs client on 7401) in the other. The server says
# when it is up; it ends on the client's STOP (or after 120 s).
run_rma() {
  local name=$1 va=$2 vb=$3 setup=${4:-true}
  echo "== rma and kvcs over dpdk $name"
  timeout 150 ip netns exec "$NS_B" sh -c "$setup && exec \"\$0\" server \"\$1\"" "$rma_peer" \
    "dpdk://$DPDK_IP_B:7300?vdev=$vb" > "$dir/rma_server.log" 2>&1 &
  local spid=$!
  pids+=("$spid")
  local up=0
  for _ in $(seq 600); do # 60 s: EAL start-up on a loaded machine, under ASan
    if grep -q '^server: ready' "$dir/rma_server.log"; then up=1; break; fi
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  local crc=1
  if [ $up -eq 1 ]; then
    timeout 120 ip netns exec "$NS_A" sh -c "$setup && exec \"\$0\" client \"\$1\" \"\$2\"" \
      "$rma_peer" "dpdk://$DPDK_IP_A:7400?vdev=$va" "dpdk://$DPDK_IP_B:7300?mac=$MAC_B" 2>&1 |
      grep -vE '^lib(bpf|xdp):' | sed 's/^/rma client: /'
    crc=${PIPESTATUS[0]}
  else
    echo "rma $name: the server did not come up"
  fi
  # The server ends 0.5 s after answering STOP; give it 20 s at most.
  for _ in $(seq 200); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
  kill "$spid" 2>/dev/null
  wait "$spid"
  local src=$?
  grep -vE 'notice|^lib(bpf|xdp):' "$dir/rma_server.log" | sed 's/^/rma server: /'
  if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then
    echo "rma $name: ok"
    return 0
  fi
  echo "rma $name: FAIL (client $crc, server $src)"
  return 1
}
run_rma af_packet "net_af_packet0,iface=$IF_A,qdisc_bypass=1" \
  "net_af_packet0,iface=$IF_B,qdisc_bypass=1" || status=1

# af_xdp needs libxdp/libbpf, a bpf filesystem (mounted only inside the
# namespaces' private mount namespace) and XDP on veth. Probe first.
bpf="mount -t bpf bpf /sys/fs/bpf"
if timeout 20 ip netns exec "$NS_A" sh -c "$bpf && exec \"\$0\" open \"\$1\"" "$peer" \
  "dpdk://$DPDK_IP_A:7001?vdev=net_af_xdp0,iface=$IF_A" > "$dir/probe.log" 2>&1; then
  run_pair af_xdp "net_af_xdp0,iface=$IF_A" "net_af_xdp0,iface=$IF_B" "$bpf" || status=1
  run_rpc af_xdp "net_af_xdp0,iface=$IF_A" "net_af_xdp0,iface=$IF_B" "$bpf" || status=1
  run_rma af_xdp "net_af_xdp0,iface=$IF_A" "net_af_xdp0,iface=$IF_B" "$bpf" || status=1
else
  echo "== af_xdp: SKIP, net_af_xdp cannot open here:"
  grep -v '^$' "$dir/probe.log" | tail -5 | sed 's/^/  /'
fi
exit $status
