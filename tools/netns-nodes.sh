#!/usr/bin/env bash
# Builds 2 or 4 "nodes" on this machine, runs a command with them, and always
# tears them down again (trap on EXIT, INT, TERM).
#
# Each node is a network namespace with a UTS namespace of its own (its own
# host name, so antdt's node identity -- host name plus boot id -- tells the
# nodes apart) and one veth link, eth0, to a bridge. The bridge lives in a
# namespace of its own too, so nothing is added to the host's network: every
# address used is inside these namespaces (10.213.<set>.<node+1>/24). Names
# contain "antdtnet" and the set's tag (default: this script's pid).
#
# usage:
#   tools/netns-nodes.sh [-n 2|4] [--rate RATE] [--slow NODE:RATE] [--tag TAG] -- COMMAND [ARGS...]
#   tools/netns-nodes.sh --exec TAG NODE -- COMMAND [ARGS...]   (inside a set that exists)
#
#   -n N          nodes (2 or 4; default 2)
#   --rate RATE   tc tbf rate limit on every node's link, both directions (e.g. 1gbit)
#   --slow N:RATE node N's link limited to RATE (overrides --rate for it): a slow link
#   --tag TAG     the set's tag (letters and digits; default: the pid)
#
# COMMAND runs in the host's namespaces with these variables set:
#   ANTDTNET_TAG            the set's tag
#   ANTDTNET_NODES          the number of nodes
#   ANTDTNET_IP_<i>         node i's address
#   ANTDTNET_HOST_<i>       node i's host name
#   ANTDTNET_EXEC           "<this script> --exec <tag>": $ANTDTNET_EXEC <i> -- cmd runs cmd in node i
# The exit status is COMMAND's; 77 when namespaces cannot be made here (not
# root, no ip/unshare/nsenter, no veth or bridge support), with the reason on stderr.
set -euo pipefail

script=$(readlink -f "$0")
run_dir_of() { echo "/run/antdtnet-$1"; }
ns_of() { echo "antdtnet-$1-n$2"; }

if [[ "${1:-}" == "--exec" ]]; then
  tag="$2" node="$3"
  shift 3
  [[ "${1:-}" == "--" ]] && shift
  dir=$(run_dir_of "$tag")
  [[ -e "$dir/uts$node" ]] || { echo "netns-nodes.sh: no node $node in set $tag" >&2; exit 2; }
  exec nsenter --net="/run/netns/$(ns_of "$tag" "$node")" --uts="$dir/uts$node" --ipc="$dir/ipc$node" -- "$@"
fi

nodes=2 rate="" slow_node="" slow_rate="" tag=$$
while (($#)); do
  case "$1" in
    -n) nodes="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --slow) slow_node="${2%%:*}"; slow_rate="${2#*:}"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "netns-nodes.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "netns-nodes.sh: no command given (see --help)" >&2; exit 2; }
[[ "$nodes" == 2 || "$nodes" == 4 ]] || { echo "netns-nodes.sh: -n takes 2 or 4, not '$nodes'" >&2; exit 2; }
[[ "$tag" =~ ^[A-Za-z0-9]{1,8}$ ]] || { echo "netns-nodes.sh: --tag takes 1-8 letters or digits" >&2; exit 2; }

skip() { echo "netns-nodes.sh: SKIP: cannot make network namespaces here: $*" >&2; exit 77; }
((EUID == 0)) || skip "needs root (ip netns, unshare --uts)"
for tool in ip unshare nsenter; do command -v "$tool" >/dev/null || skip "$tool is not installed"; done
[[ -z "$rate$slow_rate" ]] || command -v tc >/dev/null || skip "tc is not installed (needed for --rate/--slow)"

dir=$(run_dir_of "$tag")
switch="antdtnet-$tag-sw"
subnet="10.213.$((tag % 250)).0"
made_dir=0
teardown() {
  local i
  for ((i = 0; i < nodes; i++)); do
    ip netns del "$(ns_of "$tag" "$i")" 2>/dev/null || true
    for kind in uts ipc; do
      if [[ -e "$dir/$kind$i" ]]; then umount "$dir/$kind$i" 2>/dev/null || true; fi
    done
  done
  ip netns del "$switch" 2>/dev/null || true  # takes the bridge and the veth ends with it
  ((made_dir)) && rm -rf "$dir"
  return 0
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[[ -e "$dir" ]] && { echo "netns-nodes.sh: $dir exists: set $tag is in use (or was left behind)" >&2; exit 2; }
mkdir -p "$dir" && made_dir=1
ip netns add "$switch" 2>/dev/null || skip "ip netns add failed"
ip -n "$switch" link add "antdtnet-br" type bridge 2>/dev/null || skip "no bridge support"
ip -n "$switch" link set lo up
ip -n "$switch" link set "antdtnet-br" up

# tbf's bucket must hold what the link sends between two timer ticks, or TCP
# stalls below the rate (a fixed 256 kbit bucket held a 1 Gbit/s link to about
# a third of it): 10 ms of the rate, at least 32 KiB.
burst_for() {  # burst_for <rate>: bytes, e.g. 1250000b for 1gbit
  local rate="$1" n unit bits
  n="${rate%%[!0-9]*}" unit="${rate#"$n"}"
  case "$unit" in
    gbit) bits=$((n * 1000000000)) ;;
    mbit) bits=$((n * 1000000)) ;;
    kbit) bits=$((n * 1000)) ;;
    bit) bits=$n ;;
    *) echo 256kbit; return ;;  # a form tc knows and this does not: the old fixed bucket
  esac
  local bytes=$((bits / 8 / 100))
  ((bytes >= 32768)) || bytes=32768
  echo "${bytes}b"
}
limit() {  # limit <namespace> <device> <rate>: tbf on the device's egress
  tc -n "$1" qdisc add dev "$2" root tbf rate "$3" burst "$(burst_for "$3")" latency 50ms
}

for ((i = 0; i < nodes; i++)); do
  ns=$(ns_of "$tag" "$i")
  host="antdtnet-$tag-node$i"
  ip netns add "$ns"
  # The node's own host name: a UTS namespace kept by a bind mount.
  touch "$dir/uts$i"
  unshare --uts="$dir/uts$i" hostname "$host" || skip "unshare --uts failed"
  # And its own IPC namespace: UCX takes processes with one boot id and one IPC
  # namespace for one machine and would move data between the "nodes" through
  # shared memory (whose wake-ups do not cross network namespaces).
  touch "$dir/ipc$i"
  unshare --ipc="$dir/ipc$i" true || skip "unshare --ipc failed"
  # Made inside the switch namespace: no interface ever appears in the host's.
  ip -n "$switch" link add "antdtnet$i" type veth peer name eth0 netns "$ns" 2>/dev/null || skip "no veth support"
  ip -n "$switch" link set "antdtnet$i" master "antdtnet-br" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "${subnet%.0}.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  node_rate="$rate"
  [[ -n "$slow_node" && "$slow_node" == "$i" ]] && node_rate="$slow_rate"
  if [[ -n "$node_rate" ]]; then
    limit "$ns" eth0 "$node_rate"                    # what the node sends
    limit "$switch" "antdtnet$i" "$node_rate"  # what it receives
  fi
  export "ANTDTNET_IP_$i=${subnet%.0}.$((i + 1))" "ANTDTNET_HOST_$i=$host"
done
export ANTDTNET_TAG="$tag" ANTDTNET_NODES="$nodes" ANTDTNET_EXEC="$script --exec $tag"

# The links are up once the last node's eth0 reports its carrier.
for ((tries = 0; tries < 50; tries++)); do
  ip -n "$(ns_of "$tag" $((nodes - 1)))" link show eth0 | grep -q LOWER_UP && break
  sleep 0.1
done

status=0
"$@" || status=$?
exit "$status"
