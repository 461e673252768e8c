#!/usr/bin/env bash
# Two hosts on one machine (issue 27 item 3): two network namespaces joined by a veth
# pair, each with its own network stack, address and host name (and /etc/hosts naming
# both), one torchrun agent per host with 2 workers each, joined by torchrun's c10d
# rendezvous (`--nnodes 1:2`). The CUDA stand-in's 4 devices are split between the hosts
# with CUDA_VISIBLE_DEVICES, and NCCL's sockets go over the veth (NCCL_SOCKET_IFNAME).
# Everything the job sends stays inside the namespaces made here, which are removed at
# the end.
#
#   (a) 4 workers on 2 hosts write the 1-process CSV's bytes;
#   (b) with --checkpoint-dir / --save-every / --resume-latest, host B's agent and
#       workers are killed (SIGKILL) mid-run: host A's agent re-forms the job at world
#       size 2, its workers resume from the newest checkpoint, and the final CSV again
#       equals the 1-process CSV.
#
#   sudo bash tests/scripts/two_hosts_test.sh path/to/ddp_train [a|b|all]   # default all
#
# Needs root (`ip netns`, `unshare --uts`), `torchrun` on PATH (or TORCHRUN=path) and
# ddp_train built with --features nccl; meant for the CUDA stand-in (host-executed).
# With DITTO_TEST_BACKEND=gloo (ddp_train built with --features gloo) the workers are
# CPU ranks over Gloo, whose sockets bind the address towards MASTER_ADDR (the veth's).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ddp="${1:?usage: bash tests/scripts/two_hosts_test.sh path/to/ddp_train [a|b|all]}"
ddp="$(cd "$(dirname "$ddp")" && pwd)/$(basename "$ddp")"
parts="${2:-all}"
[ -x "$ddp" ] || { echo "not an executable: $ddp" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "two_hosts_test: needs root (network namespaces)" >&2; exit 2; }
torchrun="${TORCHRUN:-$(command -v torchrun || true)}"
[ -n "$torchrun" ] || { echo "torchrun is not on PATH (set TORCHRUN)" >&2; exit 2; }
limit="${TWO_HOSTS_TIMEOUT_S:-600}"
source "$ROOT/scripts/free_port.sh"

tag="$$"
ns_a="ditto-a-$tag" ns_b="ditto-b-$tag"
addr_a=10.231.0.1 addr_b=10.231.0.2
work="$(mktemp -d)"

cleanup() {
  local ns pid
  for ns in "$ns_a" "$ns_b"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "$work"
}
trap cleanup EXIT

# The two hosts: a veth pair, one end in each namespace, both renamed ditto0.
ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "dta$tag" type veth peer name "dtb$tag"
for side in a b; do
  ns="ns_$side" addr="addr_$side"
  ip link set "dt$side$tag" netns "${!ns}"
  ip -n "${!ns}" link set "dt$side$tag" name ditto0
  ip -n "${!ns}" addr add "${!addr}/24" dev ditto0
  ip -n "${!ns}" link set ditto0 up
  ip -n "${!ns}" link set lo up
  # `ip netns exec` mounts these over /etc inside the namespace.
  mkdir -p "/etc/netns/${!ns}"
  printf '127.0.0.1 localhost\n%s ditto-host-a\n%s ditto-host-b\n' "$addr_a" "$addr_b" > "/etc/netns/${!ns}/hosts"
done

# on_host NS HOSTNAME COMMAND...: COMMAND on that host, under its own host name.
on_host() {
  local ns="$1" name="$2"
  shift 2
  ip netns exec "$ns" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
}

# The reference: one process on this machine's loopback.
common=(--backend "${DITTO_TEST_BACKEND:-nccl}" --seed 7 --invariant)
export DITTO_CUDA_STANDIN_DEVICES=4 NCCL_SOCKET_IFNAME=ditto0
mkdir -p "$work/one"
(cd "$work/one" && env -u NCCL_SOCKET_IFNAME RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT="$(free_port)" timeout "$limit" "$ddp" "${common[@]}" --steps 60 --out curve.csv > "$work/one.log" 2>&1) ||
  { cat "$work/one.log" >&2; echo "FAILED: the 1-process reference" >&2; exit 1; }

# agent JOB NAME NS HOST DEVICES [ddp_train flags...]: host HOST's torchrun agent for
# job JOB (the rendezvous id both hosts share), with 2 workers on the stand-in devices
# DEVICES, working in $work/NAME, logging to $work/NAME.log.
agent() {
  local job="$1" name="$2" ns="$3" host="$4" devices="$5"
  shift 5
  mkdir -p "$work/$name"
  cd "$work/$name"
  CUDA_VISIBLE_DEVICES="$devices" on_host "$ns" "$host" timeout "$limit" "$torchrun" \
    --nnodes 1:2 --nproc-per-node 2 --max-restarts 2 \
    --rdzv-backend c10d --rdzv-endpoint ditto-host-a:29400 --rdzv-id "two-hosts-$tag-$job" \
    --rdzv-conf last_call_timeout=5 \
    --no-python "$ddp" "${common[@]}" "$@" > "$work/$name.log" 2>&1
}

fail() {
  echo "two_hosts_test: $1" >&2
  # The workers' lines, without the agents' Python warnings and tracebacks.
  for log in "$work"/*.log; do
    echo "== $log" >&2
    grep -Ev 'Warning|_conversion_method|run\.py:|cuGetProcAddress|getDeviceCount|^ |^Traceback|^torch\.|^=|^-' "$log" | tail -20 >&2
  done
  exit 1
}

# $work/shared stands for a file system both hosts mount (as a cluster's home or scratch
# is): rank 0, on whichever host it runs, writes the CSV and the checkpoints there.
mkdir -p "$work/shared"

if [ "$parts" = a ] || [ "$parts" = all ]; then
  agent a a-host-a "$ns_a" ditto-host-a 0,1 --steps 60 --out "$work/shared/a.csv" & pa=$!
  agent a a-host-b "$ns_b" ditto-host-b 2,3 --steps 60 --out "$work/shared/a.csv" & pb=$!
  wait "$pa" || fail "(a) host A's agent failed"
  wait "$pb" || fail "(a) host B's agent failed"
  grep -q "x 4)" "$work"/a-host-*.log || fail "(a) the job did not run at world size 4"
  cmp "$work/one/curve.csv" "$work/shared/a.csv" || fail "(a) the 2-host CSV differs from the 1-process CSV"
  echo "(a) 4 workers on 2 hosts (network namespaces, ${common[1]} over the veth) wrote the 1-process CSV's bytes"
fi

if [ "$parts" = b ] || [ "$parts" = all ]; then
  elastic=(--steps 120 --checkpoint-dir "$work/shared/ckpt" --save-every 20 --resume-latest
    --collective-timeout 10 --out "$work/shared/b.csv")
  agent b b-host-a "$ns_a" ditto-host-a 0,1 "${elastic[@]}" & pa=$!
  agent b b-host-b "$ns_b" ditto-host-b 2,3 "${elastic[@]}" & pb=$!
  # Once a checkpoint exists, kill everything on host B.
  for _ in $(seq 1200); do
    ls "$work"/shared/ckpt/step-*.safetensors > /dev/null 2>&1 && break
    sleep 0.1
  done
  ls "$work"/shared/ckpt/step-*.safetensors > /dev/null 2>&1 || fail "(b) no checkpoint was written"
  for pid in $(ip netns pids "$ns_b"); do kill -9 "$pid" 2>/dev/null || true; done
  echo "(b) host B's agent and workers killed with SIGKILL"
  wait "$pb" 2>/dev/null || true
  wait "$pa" || fail "(b) host A's agent did not finish the job"
  grep -q "x 2)" "$work/b-host-a.log" || fail "(b) host A did not re-form the job at world size 2"
  grep -q "resumed" "$work/b-host-a.log" || fail "(b) host A's workers did not resume"
  reference="$work/one-120"
  mkdir -p "$reference"
  (cd "$reference" && env -u NCCL_SOCKET_IFNAME RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT="$(free_port)" timeout "$limit" "$ddp" "${common[@]}" --steps 120 --out curve.csv > "$work/one-120.log" 2>&1) ||
    fail "(b) the 1-process reference"
  cmp "$reference/curve.csv" "$work/shared/b.csv" || fail "(b) the re-formed job's CSV differs from the 1-process CSV"
  grep -m1 -E "^error: .*(timed out|exited|closed)" "$work/b-host-a.log" | sed 's/^/(b) host A, first attempt: /' || true
  grep -m1 "^resumed" "$work/b-host-a.log" | sed 's/^/(b) host A, after the restart: /'
  echo "(b) host B killed mid-run: host A re-formed the job at world size 2, resumed, and wrote the 1-process CSV's bytes"
fi
