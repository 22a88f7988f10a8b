#!/usr/bin/env bash
# bench/multipath_netns.sh - RPC goodput with 1 and with 4 virtual paths over
# the multipath testbed of scripts/netns (host A, a router namespace, 4 ECMP
# paths hashing on UDP ports, host B), in four fabrics: lossless, one path
# dropping 1%, every path dropping 0.1%, one path at 1/40 of the others'
# rate. Every path is rate-limited (tc tbf, --rate-mbit) so that one path
# carries less than a host can send. The client's 4 ports are chosen so that
# they take the 4 paths from A to B, the first (the one a 1-path session
# uses) taking the path that is degraded; the answers' paths back (B's own
# hash of the server's ports) are printed, not chosen: an impairment acts on
# both directions of its path, so a virtual path whose answers come back on
# the degraded path suffers too.
#
#   bench/multipath_netns.sh [--build DIR] [--rounds R] [--seconds S]
#                            [--rate-mbit M] [--losses LIST] [--csv]
#
# --losses 0.1,0.3,1 (percent, one decimal at most): instead of those
# fabrics, lossless and each loss rate on every path (for a plot).
#
# Each round runs bench/rpc_perf --mode bw (8 MiB requests, 32 B responses,
# one at a time; its raw baseline too) with --paths 1 --go-back-n (eRPC's
# recovery), --paths 1 and then --paths 4, so the columns see the same
# machine; the table gives the medians and, for 4 paths, the share of the
# lossless 4-path median (CSV: paths "1gbn" for go-back-N). RPC_PERF_ARGS adds
# rpc_perf options (e.g. --cc-off). Needs root. The testbed is made and torn
# down here (NETNS_PREFIX, default mpb).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build-release rounds=3 seconds=2 rate=300 csv=0 losses=
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rate-mbit) rate=$2; shift 2 ;;
    --losses) losses=$2; shift 2 ;;
    --csv) csv=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "multipath_netns: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
perf=$build/bench/rpc_perf
netns=$top/scripts/netns
prefix=${NETNS_PREFIX:-mpb}
[ -x "$perf" ] || { echo "multipath_netns: $perf not built" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "multipath_netns: needs root" >&2; exit 1; }
trap '"$netns" multipath-down "$prefix" >/dev/null 2>&1' EXIT

rates=()
for n in 1 2 3 4; do rates+=(--rate-path "$n" "${rate}mbit"); done
up() {
  "$netns" multipath-up "$prefix" "$@" >/dev/null
  eval "$("$netns" multipath-env "$prefix")"
}
count() {
  ip netns exec "$NS_R" nft list counter inet erma_mp "p$1_$2" | awk '$1 == "packets" {print $2}'
}
# path_of NS SRC SPORT DST DPORT DIR: the path (1-4) a flow takes (DIR fwd:
# A to B, rev: B to A), by R's counters; 0 if none counted it.
path_of() {
  local before=() n
  for n in 1 2 3 4; do before[n]=$(count "$n" "$6"); done
  ip netns exec "$1" python3 -c "
import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('$2', $3))
for _ in range(20): s.sendto(b'probe', ('$4', $5))"
  for n in 1 2 3 4; do
    [ "$(count "$n" "$6")" -ge $((before[n] + 15)) ] && { echo "$n"; return; }
  done
  echo 0
}
distinct() { [ "$(echo "$1" | tr ' ' '\n' | grep -v '^0*$' | sort -u | wc -l)" -eq 4 ]; }

up "${rates[@]}"
base=
for b in $(seq 31870 4 32070); do
  fwd= rev=
  for k in 0 1 2 3; do
    fwd="$fwd $(path_of "$NS_A" "$IP_A" $((b + k)) "$IP_B" 31850 fwd)"
    rev="$rev $(path_of "$NS_B" "$IP_B" $((31850 + k)) "$IP_A" $((b + k)) rev)"
  done
  if distinct "$fwd"; then
    base=$b first=$(echo "$fwd" | awk '{print $1}') first_rev=$(echo "$rev" | awk '{print $1}')
    break
  fi
done
[ -n "$base" ] || { echo "multipath_netns: no 4 client ports take the 4 paths" >&2; exit 1; }
echo "# client ports $base-$((base + 3)) take paths$fwd to B, their answers paths$rev back;" \
     "the 1-path session's are $first (degraded below) and $first_rev; every path ${rate} Mbit/s" \
     "(tbf), rpc_perf --mode bw, $rounds rounds of ${seconds} s" >&2

# run K [OPTION]: one rpc_perf measurement with K paths; prints erma's Gb/s.
run() {
  ip netns exec "$NS_A" timeout 300 "$perf" --mode bw --rounds 1 --seconds "$seconds" --csv \
    --paths "$1" ${2:-} --cpu 0 --uri "udp://$IP_A:$base" \
    --server "udp://$IP_B:31850" --raw-server "udp://$IP_B:31860" \
    --listen-server "udp://$IP_B:31850" --listen-raw "udp://$IP_B:31860" \
    --spawn "ip netns exec $NS_B taskset -c 1" ${RPC_PERF_ARGS:-} 2>/dev/null |
    awk -F, '$7 == "median" && $9 == "erma" {print $10}'
}
median() { sort -g | awk '{v[NR] = $1} END {print NR ? (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) : "nan"}'; }

slow=$((rate * 1000 / 40))
every() { for n in 1 2 3 4; do printf -- '--drop-path %s %s ' "$n" "$1"; done; }
# The fabrics: name, label, multipath-up options, loss on every path (%).
names=() labels=() options=() loss=()
fabric() { names+=("$1"); labels+=("$2"); options+=("$3"); loss+=("$4"); }
fabric lossless "lossless" "" 0
if [ -z "$losses" ]; then
  fabric lossy "1 of 4 paths drops 1%" "--drop-path $first 1" -
  fabric all "0.1% loss on every path" "$(every 0.1)" 0.1
  fabric slow "1 of 4 paths at 1/40 rate" "--rate-path $first ${slow}kbit" -
else
  for x in ${losses//,/ }; do fabric "all$x" "$x% loss on every path" "$(every "$x")" "$x"; done
fi
[ "$csv" = 1 ] && echo "fabric,loss_percent,paths,round,gbps"
clean4=
for i in "${!names[@]}"; do
  f=${names[i]}
  # shellcheck disable=SC2086 # the fabric's options are words
  up "${rates[@]}" ${options[i]}
  gbn=() one=() four=()
  for r in $(seq "$rounds"); do
    v0=$(run 1 --go-back-n) v1=$(run 1) v4=$(run 4)
    gbn+=("${v0:-nan}") one+=("${v1:-nan}") four+=("${v4:-nan}")
    [ "$csv" = 1 ] && printf '%s,%s,1gbn,%s,%s\n%s,%s,1,%s,%s\n%s,%s,4,%s,%s\n' \
                             "$f" "${loss[i]}" "$r" "${v0:-nan}" "$f" "${loss[i]}" "$r" "${v1:-nan}" \
                             "$f" "${loss[i]}" "$r" "${v4:-nan}"
  done
  m0=$(printf '%s\n' "${gbn[@]}" | median)
  m1=$(printf '%s\n' "${one[@]}" | median) m4=$(printf '%s\n' "${four[@]}" | median)
  [ "$f" = lossless ] && clean4=$m4
  [ "$csv" = 1 ] || printf '%-26s 1 path go-back-N %7s Gb/s   1 path %7s Gb/s   4 paths %7s Gb/s   (%s of lossless 4 paths)\n' \
    "${labels[i]}" "$m0" "$m1" "$m4" "$(awk -v a="$m4" -v b="$clean4" 'BEGIN {printf "%.0f%%", (b > 0 ? 100 * a / b : 0)}')"
done
