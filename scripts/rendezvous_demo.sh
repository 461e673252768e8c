#!/usr/bin/env bash
# A 2-rank job forms on loopback while strangers knock on its port (issue 20): a process
# of another job (another DITTO_JOB_ID) is refused, an HTTP request is closed unanswered,
# and the real rank 1 still joins. Exits non-zero if any of that does not happen.
# Builds examples/rendezvous_demo (release) first; extra arguments go to cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --example rendezvous_demo "$@"
demo="${CARGO_TARGET_DIR:-$(pwd)/target}/release/examples/rendezvous_demo"
work="$(mktemp -d)"
trap 'kill "${master:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

# A free loopback port.
source scripts/free_port.sh
port="$(free_port)"
export MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2
# A random 256-bit secret (64 hex digits): the rendezvous refuses one under 128 bits.
secret="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export DITTO_JOB_ID="demo-$$" DITTO_RENDEZVOUS_SECRET="$secret"

RANK=0 "$demo" --timeout 30 >"$work/rank0.log" 2>&1 &
master=$!
# Wait until rank 0 listens.
for _ in $(seq 100); do
    grep -q listening "$work/rank0.log" 2>/dev/null && break
    sleep 0.1
done

echo "== a process of another job checks in as rank 1"
if DITTO_JOB_ID="someone-elses-job" RANK=1 "$demo" --timeout 5 | tee "$work/foreign.log"; then
    echo "rendezvous_demo: the foreign process was admitted" >&2
    exit 1
fi
grep -q "did not prove the job token" "$work/foreign.log"
if grep -q "demo-$$" "$work/foreign.log"; then
    echo "rendezvous_demo: the refusal told the foreign process the job id" >&2
    exit 1
fi

echo "== an HTTP request to the master's port"
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET / HTTP/1.1\r\nHost: master\r\n\r\n' >&3
answer="$(timeout 10 cat <&3 2>/dev/null || true)"
exec 3>&-
[ -z "$answer" ] || { echo "rendezvous_demo: the HTTP client got an answer: $answer" >&2; exit 1; }
echo "(closed unanswered)"

echo "== the real rank 1"
RANK=1 "$demo" --timeout 30 | tee "$work/rank1.log"
grep -q "joined; rank 0 says" "$work/rank1.log"

wait "$master"
master=
echo "== rank 0's log"
cat "$work/rank0.log"
grep -q "did not prove the job token" "$work/rank0.log"
grep -q "not a ditto check-in" "$work/rank0.log"
grep -q "the job formed" "$work/rank0.log"
echo "rendezvous_demo: the foreign process and the HTTP request were refused; the 2-rank job formed"
