#!/usr/bin/env bash
# test_netns_multipath.sh [NETNS] - the multipath testbed of scripts/netns
# (multipath-up/-env/-down): hosts A and B joined through a router namespace
# by 4 paths with ECMP routes hashing on layer-4 ports.
#  1. UDP from 32 source ports of A to B's echo server: every path's interface
#     counters (B's ends) and R's nftables counters show traffic both ways.
#  2. --drop-path 2 10: R drops 3-25% of >= 2000 datagrams on path 2, which
#     B's interface then misses; the other paths lose nothing.
#  3. --rate-path 3 200kbit: a burst makes path 3's tbf drop; the other paths'
#     qdiscs drop nothing and lose nothing.
#  4. multipath-down leaves no namespace, interface or state of the prefix.
# Every loop is bounded in count and time. Exit 0 pass, 1 fail, 77 skip (with
# the reason printed).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
netns=${1:-$here/../../scripts/netns}
flows=$here/udp_flows.py

skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, tc, nftables)"
for c in ip tc nft python3 timeout; do
  command -v "$c" >/dev/null || skip "$c not installed"
done

prefix=mp$$
prefix=${prefix:0:10}
status=0
echo_pid=
fail() { echo "FAIL: $*"; status=1; }
cleanup() {
  [ -n "$echo_pid" ] && kill "$echo_pid" 2>/dev/null
  wait 2>/dev/null
  "$netns" multipath-down "$prefix" >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 1' INT TERM

"$netns" multipath-up "$prefix" \
  || skip "cannot create the namespaces, veth pairs, routes or nftables table (multipath-up failed)"
eval "$("$netns" multipath-env "$prefix")"
echo "testbed: A $IP_A ($NS_A) - R ($NS_R) - 4 paths - B $IP_B ($NS_B)"

# stat N rx|tx: packets through B's end of path N (rx: A to B, tx: B to A).
stat() { ip netns exec "$NS_B" cat "/sys/class/net/$prefix-mb$1/statistics/$2_packets"; }
# counter NAME: packets of R's named nftables counter (empty when there is none).
counter() {
  ip netns exec "$NS_R" nft list counter inet erma_mp "$1" 2>/dev/null \
    | awk '$1 == "packets" {print $2}'
}
# qdrops NS IF: packets the root qdisc of IF dropped.
qdrops() {
  tc -n "$1" -s qdisc show dev "$2" | sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' | head -1
}
declare -a rx0 tx0
snap() { for n in 1 2 3 4; do rx0[n]=$(stat "$n" rx); tx0[n]=$(stat "$n" tx); done; }
# send BASEPORT COUNT SIZE [GAP_EVERY]: 32 flows from A to B's echo server.
send() {
  timeout 40 ip netns exec "$NS_A" python3 "$flows" send "$IP_A" "$1" 32 "$IP_B" 9000 "$2" "$3" 30 ${4:+"$4"}
}

timeout 115 ip netns exec "$NS_B" python3 "$flows" echo "$IP_B" 9000 110 &
echo_pid=$!
# Wait (5 s at most) for the echo server's socket: port 9000 is 2328 in hex.
for _ in $(seq 50); do
  ip netns exec "$NS_B" grep -q ':2328 ' /proc/net/udp && break
  sleep 0.1
done
ip netns exec "$NS_B" grep -q ':2328 ' /proc/net/udp || { echo "FAIL: no echo server"; exit 1; }

echo "== 1. 32 flows, 20 datagrams each, over 4 paths"
# The hash is fixed per boot: should 32 flows miss a path (p ~ 1e-3), try
# another 32 source ports, 3 sets at most.
base=
for attempt in 1 2 3; do
  b=$((40000 + 1000 * attempt))
  snap
  echo "flows from ports $b-$((b + 31)): $(send "$b" 20 64)"
  ok=1
  for n in 1 2 3 4; do
    drx=$(( $(stat "$n" rx) - rx0[n] )) dtx=$(( $(stat "$n" tx) - tx0[n] ))
    echo "path $n: B $prefix-mb$n rx $drx tx $dtx, R counters fwd $(counter p${n}_fwd) rev $(counter p${n}_rev)"
    # A path that carries a flow carries its 20 datagrams (ARP adds a few).
    [ "$drx" -ge 20 ] && [ "$dtx" -ge 20 ] || ok=0
  done
  if [ $ok -eq 1 ]; then base=$b; break; fi
  echo "some path carried no flow; next source ports"
done
[ -n "$base" ] || fail "32 flows did not use all 4 paths both ways in 3 tries"
base=${base:-41000}

echo "== 2. --drop-path 2 10"
"$netns" multipath-up "$prefix" --drop-path 2 10 | grep -E 'drops|nftables' || fail "multipath-up --drop-path failed"
snap
start=$SECONDS
for round in $(seq 20); do
  echo "round $round: $(send "$base" 100 64)"
  c=$(counter p2_fwd)
  [ "${c:-0}" -ge 2000 ] && break
  [ $((SECONDS - start)) -lt 45 ] || break
done
seen=$(counter p2_fwd) dropped=$(counter p2_fwd_drop)
rseen=$(counter p2_rev) rdropped=$(counter p2_rev_drop)
echo "path 2: R forwarded-to $seen, dropped $dropped; from B $rseen, dropped $rdropped"
if [ "${seen:-0}" -lt 2000 ]; then
  fail "path 2 saw only ${seen:-0} datagrams (want >= 2000)"
else
  pct=$(( 1000 * dropped / seen ))
  echo "path 2 drop rate A to B: $((pct / 10)).$((pct % 10))%"
  [ "$pct" -ge 30 ] && [ "$pct" -le 250 ] || fail "path 2 dropped $((pct / 10)).$((pct % 10))% (want 3-25%)"
fi
[ "${rdropped:-0}" -gt 0 ] || fail "path 2 dropped no replies"
drx=$(( $(stat 2 rx) - rx0[2] ))
echo "path 2: B $prefix-mb2 rx $drx (R forwarded $seen, dropped $dropped)"
[ "$drx" -lt "$seen" ] || fail "B received all of path 2's datagrams"
for n in 1 3 4; do
  fwd=$(counter p${n}_fwd) drx=$(( $(stat "$n" rx) - rx0[n] ))
  echo "path $n: R forwarded $fwd, B $prefix-mb$n rx $drx, drop counters: '$(counter p${n}_fwd_drop)$(counter p${n}_rev_drop)'"
  [ -z "$(counter p${n}_fwd_drop)$(counter p${n}_rev_drop)" ] || fail "path $n has a drop rule"
  [ $((100 * drx)) -ge $((98 * fwd)) ] || fail "path $n lost datagrams ($drx of $fwd reached B)"
done

echo "== 3. --rate-path 3 200kbit"
"$netns" multipath-up "$prefix" --rate-path 3 200kbit | grep tbf || fail "multipath-up --rate-path failed"
[ -z "$(counter p2_fwd_drop)" ] || fail "path 2's drop rule outlived multipath-up without it"
snap
echo "burst: $(send "$base" 30 1000 32)"
d3=$(qdrops "$NS_R" "$prefix-mr3") d3b=$(qdrops "$NS_B" "$prefix-mb3")
fwd3=$(counter p3_fwd) drx3=$(( $(stat 3 rx) - rx0[3] ))
echo "path 3: tbf on $prefix-mr3: $(tc -n "$NS_R" -s qdisc show dev "$prefix-mr3" | tr -s '\n ' ' ')"
echo "path 3: tbf dropped $d3 (R end) and $d3b (B end); R forwarded $fwd3, B rx $drx3"
[ "${d3:-0}" -gt 0 ] || fail "path 3's tbf dropped nothing under a burst"
[ "$drx3" -lt "$fwd3" ] || fail "B received all of path 3's datagrams"
for n in 1 2 4; do
  dr=$(qdrops "$NS_R" "$prefix-mr$n") db=$(qdrops "$NS_B" "$prefix-mb$n")
  fwd=$(counter p${n}_fwd) drx=$(( $(stat "$n" rx) - rx0[n] ))
  echo "path $n: qdisc drops $dr (R end) $db (B end); R forwarded $fwd, B rx $drx"
  [ "${dr:-0}" -eq 0 ] && [ "${db:-0}" -eq 0 ] || fail "path $n's qdisc dropped packets"
  [ $((100 * drx)) -ge $((98 * fwd)) ] || fail "path $n lost datagrams ($drx of $fwd reached B)"
done

echo "== 4. multipath-down"
kill "$echo_pid" 2>/dev/null
wait "$echo_pid" 2>/dev/null
echo_pid=
"$netns" multipath-down "$prefix"
left=$(ip netns list | awk -v p="$prefix-" 'index($1, p) == 1')
[ -z "$left" ] || fail "namespaces left: $left"
! ip -o link show | grep -qF " $prefix-" || fail "interfaces of $prefix left in the host's namespace"
[ ! -e "/run/erma-netns/$prefix.multipath" ] || fail "state file left"
"$netns" multipath-down "$prefix" | grep -q nothing || fail "a second multipath-down found something"

[ $status -eq 0 ] && echo "PASS"
exit $status
