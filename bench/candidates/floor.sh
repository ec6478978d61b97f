#!/usr/bin/env bash
# floor: not a proxy. `benchcli floor`, the cheapest relay the harness can put
# between client and upstream (no policy, a blocking thread per direction,
# 1 MiB copies). It enforces nothing; it is here to show what one extra hop
# costs on this machine, so a proxy's ratio can be read against that ceiling.
set -euo pipefail
W="${BENCH_WORK:-}"
BENCHCLI="$(command -v benchcli 2>/dev/null || echo "${BENCH_TOOLS:-/opt/bench-tools}/bin/benchcli")"
case "${1:-}" in
  check)   [ -x "$BENCHCLI" ] || { echo "benchcli not built (bench/install/all.sh)"; exit 1; } ;;
  version) echo "benchcli floor (reference relay, no policy)" ;;
  config)  echo "benchcli floor --listen 127.0.0.1:\$PORT" ;;
  start)
    "$BENCHCLI" floor --listen "127.0.0.1:$BENCH_PORT" >"$W/stdout.log" 2>&1 &
    echo $! > "$W/main.pid"
    "$BENCH_LIB/waitport.sh" 127.0.0.1 "$BENCH_PORT" 10
    cat > "$W/proxy.env" <<E
PID=$(cat "$W/main.pid")
HTTP_PROXY_URL=http://127.0.0.1:$BENCH_PORT
CONNECT_PROXY_URL=http://127.0.0.1:$BENCH_PORT
CLIENT_CA=$BENCH_CA_CERT
INTERCEPTS=0
E
    ;;
  stop)
    pid=$(cat "$W/main.pid" 2>/dev/null || true)
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done; kill -9 "$pid" 2>/dev/null || true; }
    ;;
  wrap|wrap-client) exit 1 ;;
esac
