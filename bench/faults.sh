#!/usr/bin/env bash
# Load and faults: held connections, one greedy client beside another, slowloris, 4 GiB bodies, upstream faults, a
# full log filesystem, SIGTERM drain, kill -9 — against a real `leash proxy`, in a private network and mount namespace
# (its own loopback, its own tmpfs mount), so nothing leaves the machine and nothing on the host changes. Every loop
# is bounded; the whole run is killed after 10 minutes. Prints a markdown table (copied into bench/RESULTS.md by hand).
#
#   sudo bench/faults.sh            # full: 8,000 held connections, 9,000 held tunnels, a greedy client asking for
#                                   # 10,000 connections of leash's 9,968 (from one address, then from 8) while
#                                   # another sends a request every 50 ms,
#                                   # 2,000 slowloris clients, 4 GiB each way (~2 min after the build; the 120 s
#                                   # response time-out runs beside)
#   sudo bench/faults.sh --quick    # 1,000 / 1,000 / 1,000 of 992 (leash at 2,048 open files) / 200 / 256 MiB
#                                   # (as long: the response time-out sets the pace)
#   sudo bench/faults.sh --only=sigterm,kill9   # some steps: held tunnels two-clients greedy-spread
#                                               # slowloris big upstream full-log sigterm kill9
#   LEASH_BIN=target/x86_64-unknown-linux-gnu/release/leash sudo -E bench/faults.sh   # an existing binary instead of
#                                                                                     # `cargo build --release`
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" != "--inside" ]; then
  [ "$(id -u)" = 0 ] || { echo "bench/faults.sh needs root (network and mount namespaces, a tmpfs mount)" >&2; exit 2; }
  if [ -z "${LEASH_BIN:-}" ]; then
    cargo build --release --bin leash
    LEASH_BIN="${CARGO_TARGET_DIR:-target}/$(rustc -vV | sed -n 's/^host: //p')/release/leash"
  fi
  LEASH_BIN=$(readlink -f "$LEASH_BIN")
  export LEASH_BIN
  exec timeout 600 unshare --net --mount --propagation private "$0" --inside "$@"
fi
shift

ip link set lo up
# As many open files as the hard limit allows (10,000 held connections need 10,000 in leash and the client).
ulimit -n "$(ulimit -Hn)"
WORK=$(mktemp -d /tmp/leash-faults.XXXXXX)
PY=/usr/bin/python3
$PY bench/faults/origin.py 18080 14443 >"$WORK/origin.out" 2>&1 &
origin=$!
trap 'kill $origin 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do grep -q ready "$WORK/origin.out" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$WORK/origin.out" || { echo "the test upstream did not start: $(cat "$WORK/origin.out")" >&2; exit 1; }
echo "work directory: $WORK (logs, leash's stderr, faults.md)"
$PY bench/faults/faults.py "$LEASH_BIN" "$WORK" "$@"
