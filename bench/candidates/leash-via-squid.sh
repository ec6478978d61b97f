#!/usr/bin/env bash
# leash (this project) with an upstream proxy: the leash.sh allowlist, and every
# allowed request going out through a squid of its own (the corporate proxy,
# allowing everything, no caching) via `upstream_proxy`. Compare it with the
# `squid` candidate (squid alone, enforcing the allowlist) in the same run.
# Skipped unless a leash binary is found (LEASH_BIN or `leash` on PATH).
set -euo pipefail
W="${BENCH_WORK:-}"
LEASH="${LEASH_BIN:-$(command -v leash 2>/dev/null || true)}"
SQUID_PORT=$((BENCH_PORT + 1000))
policy() {
  echo "network:"
  echo "  mode: allowlist"
  echo "  allowed_hosts:"
  for h in $BENCH_ALLOWED; do echo "    - $h"; done
  echo "  upstream_proxy: http://127.0.0.1:$SQUID_PORT"
}
squid_conf() {
  cat <<E
http_port 127.0.0.1:$SQUID_PORT
workers 1
pid_filename $W/squid.pid
cache_log $W/cache.log
access_log none
coredump_dir $W
cache deny all
cache_mem 0 MB
max_filedescriptors 65536
shutdown_lifetime 0 seconds
pinger_enable off
http_access allow all
E
}
case "${1:-}" in
  check)
    [ -n "$LEASH" ] && [ -x "$LEASH" ] || { echo "no leash binary (set LEASH_BIN=/path/to/leash)"; exit 1; }
    command -v squid >/dev/null || { echo "squid not installed (apt-get install squid)"; exit 1; } ;;
  version) "$LEASH" --version 2>/dev/null | head -1 || echo "leash (unknown version)" ;;
  config)  echo "leash proxy --policy policy.yaml --listen 127.0.0.1:\$PORT --log \$W/audit.jsonl (squid on \$PORT+1000)"; policy | sed 's/^/# /' ;;
  start)
    squid_conf > "$W/squid.conf"
    chown -R proxy:proxy "$W" 2>/dev/null || chmod 0777 "$W"
    squid -N -n leashbench -f "$W/squid.conf" >"$W/squid.out" 2>&1 &
    echo $! > "$W/squid.main.pid"
    "$BENCH_LIB/waitport.sh" 127.0.0.1 "$SQUID_PORT" 20
    policy > "$W/policy.yaml"
    "$LEASH" proxy --policy "$W/policy.yaml" --listen "127.0.0.1:$BENCH_PORT" --log "$W/audit.jsonl" \
      >"$W/stdout.log" 2>&1 &
    echo $! > "$W/main.pid"
    for i in $(seq 200); do grep -q 'listening on' "$W/stdout.log" && break; sleep 0.05; done
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
    for f in main.pid squid.main.pid; do
      pid=$(cat "$W/$f" 2>/dev/null || true)
      [ -n "$pid" ] && { kill -INT "$pid" 2>/dev/null || true; for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done; kill -9 "$pid" 2>/dev/null || true; }
    done
    ;;
  wrap) exit 1 ;;
esac
