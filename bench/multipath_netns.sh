#!/usr/bin/env bash
# bench/multipath_netns.sh - RPC goodput with 1 and with 4 virtual paths over
# the multipath testbed of scripts/netns (host A, a router namespace, 4 ECMP
# paths hashing on UDP ports, host B), in four fabrics: lossless, one path
# dropping 1%, every path dropping 0.1%, one path at 1/40 of the others'
# rate. Every path is rate-limited (tc tbf, --rate-mbit) so that one path
# carries less than a host can send. The client's 4 ports are chosen so that
# they take the 4 paths from A to B, the first (the one a 1-path session
# uses) taking the path that is degraded.
#
#   bench/multipath_netns.sh [--build DIR] [--rounds R] [--seconds S]
#                            [--rate-mbit M] [--csv]
#
# Each round runs bench/rpc_perf --mode bw (8 MiB requests, 32 B responses,
# one at a time; its raw baseline too) with --paths 1 and then --paths 4, so
# both columns see the same machine; the table gives the medians and, for 4
# paths, the share of the lossless 4-path median. RPC_PERF_ARGS adds
# rpc_perf options (e.g. --cc-off). Needs root. The testbed is made and torn
# down here (NETNS_PREFIX, default mpb).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build-release rounds=3 seconds=2 rate=300 csv=0
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rate-mbit) rate=$2; shift 2 ;;
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
fwd() {
  ip netns exec "$NS_R" nft list counter inet erma_mp "p$1_fwd" | awk '$1 == "packets" {print $2}'
}
# path_of PORT: the path a flow from A:PORT to B:31850 takes.
path_of() {
  local before=() n
  for n in 1 2 3 4; do before[n]=$(fwd "$n"); done
  ip netns exec "$NS_A" python3 -c "
import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('$IP_A', $1))
for _ in range(5): s.sendto(b'probe', ('$IP_B', 31850))"
  for n in 1 2 3 4; do
    [ "$(fwd "$n")" -ge $((before[n] + 5)) ] && { echo "$n"; return; }
  done
  echo 0
}

up "${rates[@]}"
base=
for b in $(seq 31870 4 32070); do
  seen=
  for k in 0 1 2 3; do seen="$seen $(path_of $((b + k)))"; done
  if [ "$(echo "$seen" | tr ' ' '\n' | grep -v '^0*$' | sort -u | wc -l)" -eq 4 ]; then
    base=$b first=$(echo "$seen" | awk '{print $1}')
    break
  fi
done
[ -n "$base" ] || { echo "multipath_netns: no 4 client ports take the 4 paths" >&2; exit 1; }
echo "# client ports $base-$((base + 3)) take paths$seen; the 1-path session's is path $first;" \
     "every path ${rate} Mbit/s (tbf), rpc_perf --mode bw, $rounds rounds of ${seconds} s" >&2

# run K: one rpc_perf measurement with K paths; prints erma's Gb/s.
run() {
  ip netns exec "$NS_A" timeout 300 "$perf" --mode bw --rounds 1 --seconds "$seconds" --csv \
    --paths "$1" --cpu 0 --uri "udp://$IP_A:$base" \
    --server "udp://$IP_B:31850" --raw-server "udp://$IP_B:31860" \
    --listen-server "udp://$IP_B:31850" --listen-raw "udp://$IP_B:31860" \
    --spawn "ip netns exec $NS_B taskset -c 1" ${RPC_PERF_ARGS:-} 2>/dev/null |
    awk -F, '$7 == "median" && $9 == "erma" {print $10}'
}
median() { sort -g | awk '{v[NR] = $1} END {print NR ? (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) : "nan"}'; }

slow=$((rate * 1000 / 40))
declare -A fabric=(
  [lossless]=""
  [lossy]="--drop-path $first 1"
  [all]="--drop-path 1 0.1 --drop-path 2 0.1 --drop-path 3 0.1 --drop-path 4 0.1"
  [slow]="--rate-path $first ${slow}kbit"
)
declare -A label=([lossless]="lossless" [lossy]="1 of 4 paths drops 1%"
                  [all]="0.1% loss on every path" [slow]="1 of 4 paths at 1/40 rate")
[ "$csv" = 1 ] && echo "fabric,paths,round,gbps"
clean4=
for f in lossless lossy all slow; do
  # shellcheck disable=SC2086 # the fabric's options are words
  up "${rates[@]}" ${fabric[$f]}
  one=() four=()
  for r in $(seq "$rounds"); do
    v1=$(run 1) v4=$(run 4)
    one+=("${v1:-nan}") four+=("${v4:-nan}")
    [ "$csv" = 1 ] && printf '%s,1,%s,%s\n%s,4,%s,%s\n' "$f" "$r" "${v1:-nan}" "$f" "$r" "${v4:-nan}"
  done
  m1=$(printf '%s\n' "${one[@]}" | median) m4=$(printf '%s\n' "${four[@]}" | median)
  [ "$f" = lossless ] && clean4=$m4
  [ "$csv" = 1 ] || printf '%-26s 1 path %7s Gb/s   4 paths %7s Gb/s   (%s of lossless 4 paths)\n' \
    "${label[$f]}" "$m1" "$m4" "$(awk -v a="$m4" -v b="$clean4" 'BEGIN {printf "%.0f%%", (b > 0 ? 100 * a / b : 0)}')"
done
