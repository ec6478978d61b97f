#!/usr/bin/env bash
# `leash attach` figures (bench/RESULTS.md): start-up to the `listening inside` line on a fresh `ip netns add`
# namespace (median of RUNS), and the resident memory of one `leash attach --dir` serving 0, 1, 10 and 100
# namespaces (VmRSS from /proc/PID/status, idle, once every attachment is served). Needs root and iproute2; every
# namespace it makes is deleted on exit, also on failure or Ctrl-C.
#
#   bench/attach.sh [--runs N] [--max N]        LEASH=path/to/leash to pick the binary (default: the release build)
set -euo pipefail

RUNS=20
MAX=100
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS=$2; shift 2 ;;
        --max) MAX=$2; shift 2 ;;
        *) echo "usage: $0 [--runs N] [--max N]" >&2; exit 2 ;;
    esac
done
LEASH=${LEASH:-${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release/leash}
[ -x "$LEASH" ] || { echo "no leash binary at $LEASH (cargo build --release, or set LEASH)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (ip netns add, setns)" >&2; exit 2; }

PREFIX="lab$$n"
WORK=$(mktemp -d)
AGENT=
cleanup() {
    [ -n "$AGENT" ] && kill "$AGENT" 2>/dev/null && wait "$AGENT" 2>/dev/null
    for ns in $(ip netns list | awk '{print $1}' | grep "^$PREFIX" || true); do ip netns del "$ns"; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

printf 'network:\n  mode: allowlist\n  allowed_hosts: [allowed.test]\n' > "$WORK/policy.yaml"
mkdir "$WORK/attachments" "$WORK/policies"
cp "$WORK/policy.yaml" "$WORK/policies/agent.yaml"

newns() { ip netns add "$1" && ip -n "$1" link set lo up; }

echo "leash: $LEASH ($("$LEASH" --version 2>/dev/null || echo unknown version))"
echo "== start-up to 'listening inside' (fresh namespace each run, $RUNS runs)"
python3 - "$LEASH" "$WORK/policy.yaml" "$RUNS" "$PREFIX" <<'EOF'
import statistics, subprocess, sys, time
leash, policy, runs, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
times = []
for i in range(runs):
    ns = f"{prefix}s{i}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    t0 = time.perf_counter()
    p = subprocess.Popen([leash, "attach", "--netns", f"/run/netns/{ns}", "--policy", policy],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    times.append((time.perf_counter() - t0) * 1000)
    assert line.startswith("listening inside"), line
    p.terminate(); p.wait(timeout=10)
    subprocess.run(["ip", "netns", "del", ns], check=True)
times.sort()
print(f"median {statistics.median(times):.2f} ms  min {times[0]:.2f}  max {times[-1]:.2f}  "
      f"p90 {times[int(len(times) * 0.9) - 1]:.2f}")
EOF

echo "== memory of one 'leash attach --dir' by attached namespaces"
"$LEASH" attach --dir "$WORK/attachments" >"$WORK/agent.out" 2>"$WORK/agent.err" &
AGENT=$!
rss() { awk '/^VmRSS/ {print $2}' "/proc/$AGENT/status"; }
# Served: the agent has logged `serving` for every file (each line is one attach, bounded wait of 30 s).
wait_served() {
    local want=$1 deadline=$((SECONDS + 30))
    until [ "$(grep -c ': serving ' "$WORK/agent.err" || true)" -ge "$want" ]; do
        [ $SECONDS -lt $deadline ] || { echo "only $(grep -c ': serving ' "$WORK/agent.err") of $want served" >&2; cat "$WORK/agent.err" >&2; exit 1; }
        sleep 0.2
    done
    sleep 2 # a scan or two more: nothing else in flight when RSS is read
}
sleep 2
base=$(rss)
printf '%-10s %10s %16s %16s\n' attached "VmRSS kB" "kB/ns from 0" "kB/ns this step"
printf '%-10s %10s %16s %16s\n' 0 "$base" - -
n=0
prev_n=0
prev=$base
for target in 1 10 100; do
    [ "$target" -le "$MAX" ] || break
    while [ $n -lt "$target" ]; do
        ns="${PREFIX}d$n"
        newns "$ns"
        printf 'netns: /run/netns/%s\npolicy: ../policies/agent.yaml\nlabels: {pod: pod-%d}\n' "$ns" "$n" \
            > "$WORK/attachments/pod-$n.yaml"
        n=$((n + 1))
    done
    wait_served "$n"
    now=$(rss)
    printf '%-10s %10s %16s %16s\n' "$n" "$now" "$(( (now - base) / n ))" "$(( (now - prev) / (n - prev_n) ))"
    prev=$now
    prev_n=$n
done
echo "threads: $(awk '/^Threads/ {print $2}' "/proc/$AGENT/status"), fds: $(ls "/proc/$AGENT/fd" | wc -l)"
